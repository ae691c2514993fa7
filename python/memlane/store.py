"""The record API of an open store, :class:`MemoryStore`, by its public name.

:class:`memlane.Memory` is a :class:`MemoryStore` (records, versions, search, JSONL)
that also has the knowledge and notes methods. The layers that build on the record API
(:mod:`memlane.knowledge`, :mod:`memlane.notes`) take a :class:`MemoryStore` and name
it from here: its implementation, in ``memlane._memory``, is private to the store.
"""

from __future__ import annotations

from memlane._memory.store import MemoryStore

__all__ = ["MemoryStore"]
