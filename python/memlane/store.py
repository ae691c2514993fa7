"""The record API of an open store, :class:`MemoryStore`, by its public name.

:class:`memlane.Memory` is a :class:`MemoryStore` (records, versions, search, JSONL)
that also has the knowledge and notes methods. The layers that build on the record API
(:mod:`memlane.knowledge`, :mod:`memlane.notes`) take a :class:`MemoryStore` and name
it from here: its implementation, in ``memlane._memory``, is private to the store.
``StoreStats`` is what ``memlane.Memory.stats`` reports, ``ScopeCount`` what
``MemoryStore.scopes`` counts, ``JobOutcome`` what ``MemoryStore.jobs`` keeps of work done.
"""

from __future__ import annotations

from memlane._memory.health import StoreStats
from memlane._memory.jobs import OUTCOMES_KEPT, JobOutcome
from memlane._memory.listing import ScopeCount
from memlane._memory.store import MemoryStore

__all__ = ["OUTCOMES_KEPT", "JobOutcome", "MemoryStore", "ScopeCount", "StoreStats"]
