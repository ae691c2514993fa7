"""Change events of an open store, by their public names: ``Memory.events`` is an
``Events``, whose ``subscribe`` gives a ``Subscription`` of ``Event`` dicts
(adds, supersedes, updates, deletes and expiry sweeps, in commit order: this process's,
and on PostgreSQL every other process's too).
A write never waits for a subscriber: a full queue drops events and counts them, and the
subscriber reads one ``{"type": "lost", "count": n}`` event in their place."""

from __future__ import annotations

from memlane._memory.events import Event, Events, Subscription

__all__ = ["Event", "Events", "Subscription"]
