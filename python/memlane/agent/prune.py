"""Pruning: remove old memories that are neither important, nor used, nor evergreen."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from memlane.errors import InvalidArgumentError

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["prune"]

_PAGE = 1000


def _limit(value: object, label: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgumentError(f"{label} must be a finite number, got {value!r}")
    return float(value)


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
    age = _limit(max_age_days, "max_age_days")
    imp = _limit(keep_importance_at_least, "keep_importance_at_least")
    acc = _limit(keep_access_count_above, "keep_access_count_above")
    if age is None and imp is None and acc is None:
        raise InvalidArgumentError(
            "give at least one of max_age_days, keep_importance_at_least, keep_access_count_above"
        )
    if age is not None and age < 0:
        raise InvalidArgumentError(f"max_age_days must be >= 0, got {age}")
    clock = time.time() if now is None else float(now)
    end = None if age is None else clock - age * 86400.0
    doomed: list[MemoryRecord] = []
    offset = 0
    while True:
        page = mem.list(
            table,
            end=end,
            limit=_PAGE,
            offset=offset,
            order="asc",
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )
        for rec in page:
            if rec.evergreen:
                continue
            if imp is not None and rec.importance >= imp:
                continue
            if acc is not None and rec.access_count > acc:
                continue
            doomed.append(rec)
        if len(page) < _PAGE:
            break
        offset += _PAGE
    # One transaction (one change, one commit) for them all; those deleted meanwhile are skipped.
    deleted = mem._delete_ids([rec.id for rec in doomed]) if doomed else set()
    return [rec for rec in doomed if rec.id in deleted]
