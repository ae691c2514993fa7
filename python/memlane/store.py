"""The record API of an open store, ``MemoryStore``, by its public name.

``memlane.Memory`` is a ``MemoryStore`` (records, versions, search, JSONL)
that also has the knowledge and notes methods. The layers that build on the record API
(``memlane.knowledge``, ``memlane.notes``) take a ``MemoryStore`` and name
it from here: its implementation, in ``memlane._memory``, is private to the store.
``StoreStats`` is what ``memlane.Memory.stats`` reports, ``ScopeCount`` what
``MemoryStore.scopes`` counts, ``JobBook`` what ``MemoryStore.jobs`` is (the records of
work in progress, written conditionally), ``JobOutcome`` what it keeps of work done.
"""

from __future__ import annotations

from memlane._memory.health import StoreStats
from memlane._memory.job_book import OUTCOMES_KEPT, JobBook, JobOutcome
from memlane._memory.listing import ScopeCount
from memlane._memory.memory_store import MemoryStore

__all__ = ["OUTCOMES_KEPT", "JobBook", "JobOutcome", "MemoryStore", "ScopeCount", "StoreStats"]
