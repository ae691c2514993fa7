"""The engine room of :class:`memlane.Memory`, one concern per module.

- :mod:`.encoding`: a record to add, validated (:class:`NewRecord`), and its
  conversions to a database row, to the engine's columns and to a
  :class:`~memlane.records.MemoryRecord`.
- :mod:`.access`: access counts gathered by searches until they are flushed.
- :mod:`.sync`: the engine kept in step with the database (open, pin, re-embed,
  replay, follow, snapshot).
- :mod:`.duplicates`: what ``add(unique=True)`` and the dedup window decide.
- :mod:`.writer`: the write path (add, replace, update, delete, prune).
- :mod:`.querying`: a search's arguments turned into one engine call, and its hits.
- :mod:`.maintenance`: the background thread and the exit hook.
- :mod:`.jsonl`: export and import.
- :mod:`.versions`: update, supersede and history (:class:`Versions`).
- :mod:`.store`: :class:`MemoryStore`, the record API over these (``memlane.Memory``
  opens the store, wires them and inherits it).

Nothing here imports :mod:`memlane.knowledge` or :mod:`memlane.agent`; they
build on :class:`MemoryStore`.
"""
