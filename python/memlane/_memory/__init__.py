"""The engine room of ``memlane.Memory``, one concern per module.

- ``.encoding``: a record to add, validated (``NewRecord``), and its
  conversions to a database row, to the engine's columns and to a
  ``MemoryRecord``.
- ``.access``: access counts gathered by searches until they are flushed.
- ``.sync``: the engine kept in step with the database (open, pin, re-embed,
  replay, follow, snapshot).
- ``.duplicates``: what ``add(unique=True)`` and the dedup window decide.
- ``.writer``: the write path (add, replace, update, delete, prune).
- ``.querying``: a search's arguments turned into one engine call, and its hits.
- ``.maintenance``: the background thread and the exit hook.
- ``.jsonl``: export and import.
- ``.versions``: update, supersede and history (``Versions``).
- ``.store``: ``MemoryStore``, the record API over these (``memlane.Memory``
  opens the store, wires them and inherits it).

Nothing here imports ``memlane.knowledge`` or ``memlane.agent``; they
build on ``MemoryStore``.
"""
