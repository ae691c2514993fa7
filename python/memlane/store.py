"""The record API of an open store, ``MemoryStore``, by its public name.

``memlane.Memory`` is a ``MemoryStore`` (records, versions, search, JSONL)
that also has the knowledge and notes methods. The layers that build on the record API
(``memlane.knowledge``, ``memlane.notes``) take a ``MemoryStore`` and name
it from here: its implementation, in ``memlane._memory``, is private to the store.
"""

from __future__ import annotations

from memlane._memory.store import MemoryStore

__all__ = ["MemoryStore"]
