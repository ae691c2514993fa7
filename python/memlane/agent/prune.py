"""Pruning: remove old memories that are neither important, nor used, nor evergreen.

The work is :meth:`memlane.Memory.prune` (one filtered delete); this is its
function form for agent loops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["prune"]


def prune(
    mem: Memory,
    *,
    max_age_days: float | None = None,
    keep_importance_at_least: float | None = None,
    keep_access_count_above: int | None = None,
    table: str | None = "memories",
    now: float | None = None,
    agent_id: str | None = None,
    user_id: str | None = None,
    room_id: str | None = None,
    world_id: str | None = None,
    session_id: str | None = None,
    namespace: str | None = None,
) -> list[MemoryRecord]:
    """Deletes the memories of ``table`` and ``scope`` that are prunable; returns them.

    A memory is prunable when it was created more than ``max_age_days`` ago
    (any age if None), and it is not kept by importance (``importance >=
    keep_importance_at_least``) or by use (``access_count >
    keep_access_count_above``). Evergreen memories are never pruned. At least
    one criterion must be given. ``table=None`` prunes every table (knowledge
    fragments and messages included).
    """
    return mem.prune(
        max_age_days=max_age_days,
        keep_importance_at_least=keep_importance_at_least,
        keep_access_count_above=keep_access_count_above,
        table=table,
        now=now,
        agent_id=agent_id,
        user_id=user_id,
        room_id=room_id,
        world_id=world_id,
        session_id=session_id,
        namespace=namespace,
    )
