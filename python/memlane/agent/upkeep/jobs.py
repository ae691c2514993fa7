"""Upkeep jobs: what a turn asked of the background worker, as it is kept in the store
(``memlane.Memory.jobs``) until it is done.

A job names its kind, the event it came from, the turn's time, its **owner** (the
agent's table, scope settings and its store's ``default_scope``: only an
``AgentMemory`` with the same owner runs it) and its **holder** (the process and
``AgentMemory`` running it, and its lease, renewed while it holds the job: every
write of a held record is conditional on the record being as the holder wrote it, so
a holder that lost its job stores nothing of it). Work that an LLM does
and that would store something twice if done twice (reflection, consolidation) is
recorded before the turn returns and dropped when done. A reflection records the
model's answer in the job before it stores anything (its **plan**), and each memory it
stores names the job and the operation (``metadata["upkeep_job"]``, ``["upkeep_op"]``),
so a job found again after a crash finishes exactly the operations that are missing.
Consolidation stores all it makes in one transaction, tagged with the job, so a job
that finds its tag is finished by dropping its sources.

A job record is data from whoever can write the store: ``Job.loads`` checks every
field and raises ``JobRecordError`` for anything that is not a job of this version;
the event is kept as the platform gave it (source, contact, chat, name) and resolved
again by the resuming agent's own ``SessionScope``, so a record
cannot point a job at a scope the agent would not give that contact.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from memlane.agent.holder import Holder, finite, record_text
from memlane.errors import ConflictError, InvalidArgumentError
from memlane.scoping import MAX_PLATFORM_TEXT, EventScope, SessionScope

__all__ = [
    "DURABLE",
    "JOB_OP",
    "JOB_TAG",
    "MAX_SPAN",
    "Holder",
    "Job",
    "JobKind",
    "JobLostError",
    "JobRecordError",
    "JobSkippedWarning",
    "coalesce",
    "earlier_windows",
    "live_tokens",
    "owner_of",
]

JobKind = Literal[
    "reflection", "consolidation", "facts", "daily", "profile", "eviction", "compaction"
]
#: The kinds kept in the store until done.
DURABLE: frozenset[str] = frozenset({"reflection", "consolidation"})
#: The metadata key naming the job that stored a memory.
JOB_TAG = "upkeep_job"
#: The metadata key naming the operation of a reflection's plan that stored a memory.
JOB_OP = "upkeep_op"
log = logging.getLogger("memlane.agent")

_VERSION = 2
#: The most windows one reflection shows (a model stalled longer loses the oldest turns'
#: reflection, and the worker says so).
MAX_SPAN = 5
_MAX_RECORD = 1 << 20  # a job record is a few KB; a larger one is not ours
_HOLDER_ROOM = 4096  # a written record's room for a longer holder, read still
# The longest text of a recorded event: what an event's scope takes (a source and a
# contact or chat id, each at most MAX_PLATFORM_TEXT, joined by ":").
_EVENT_TEXT = 2 * MAX_PLATFORM_TEXT + 1


class JobRecordError(InvalidArgumentError):
    """A record in ``Memory.jobs`` that is not an upkeep job of this version."""


class JobLostError(ConflictError):
    """A job's record is no longer as its holder wrote it: another process took it over
    (its lease had passed) or it went; the holder stores nothing more of it."""


class JobSkippedWarning(UserWarning):
    """An upkeep job record was skipped (not a job, or not this agent's to run); the
    record stays in the store for inspection."""


# The tokens of this process's AgentMemory objects whose workers may still run a job.
_live: set[str] = set()
_live_lock = threading.Lock()


def live_tokens() -> frozenset[str]:
    """The tokens of this process's holders that may still run a job."""
    with _live_lock:
        return frozenset(_live)


class Lease:
    """An agent's token among the live ones from its start until neither of its two
    workers may run a job any more (each calls ``ended`` once); ``then`` is called at
    that point, once."""

    def __init__(self, token: str, then: Callable[[], None]) -> None:
        self.token = token
        self._then = then
        self._ended = 0
        with _live_lock:
            _live.add(token)

    def ended(self) -> None:
        with _live_lock:
            self._ended += 1
            last = self._ended == 2
            if last:
                _live.discard(self.token)
        if last:
            self._then()


def coalesce(newer: Job, older: Job) -> None:
    """A waiting job ``older`` is replaced by ``newer`` of its slot: a profile job takes
    over its messages' count, a reflection its windows (up to ``MAX_SPAN``)."""
    p, q = newer.payload, older.payload
    if newer.kind == "profile":
        p["count"] = int(p.get("count", 1)) + int(q.get("count", 1))
        names = [n for n in q.get("names", []) if n not in p.get("names", [])]
        p["names"] = [*names, *p.get("names", [])]
    elif newer.kind == "reflection":
        ends = earlier_windows([*older.ends, *[older.now] * older.span, *newer.ends], newer.span)
        object.__setattr__(newer, "ends", ends)


def earlier_windows(ends: Iterable[float], own: int = 1) -> tuple[float, ...]:
    """The turn times of the earlier windows a reflection with ``own`` windows of its own
    shows, oldest first: the newest ``MAX_SPAN - own`` (at most ``MAX_SPAN - 1``; a
    model stalled longer loses the oldest windows' reflection, and the worker says so).
    A time given twice is two windows that end then (a clock that gave two turns one
    reading)."""
    kept = sorted(ends)
    room = MAX_SPAN - max(own, 1)
    if len(kept) > room:
        log.warning(
            "memlane: reflection fell %d windows behind its model: the oldest %d are not reflected",
            len(kept) + max(own, 1),
            len(kept) - room,
        )
    return tuple(kept[max(len(kept) - room, 0) :]) if room > 0 else ()


def owner_of(
    table: str, scopes: SessionScope, default_scope: Mapping[str, str] | None = None
) -> str:
    """An agent's owner key: its table, the settings that map events to scopes and the
    store's ``default_scope`` (which its every read and write is under: two agents kept
    apart by it own apart, so one never runs the other's job with its own model)."""
    spec: dict[str, Any] = {
        "table": table,
        "mode": scopes.mode,
        "agent_id": scopes.agent_id,
        "namespace": scopes.namespace,
        "links": sorted(scopes.identity_links.items()),
    }
    if default_scope:  # only then: a job recorded without one keeps its owner
        spec["default_scope"] = sorted(default_scope.items())
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Job:
    """One piece of upkeep: ``kind`` for ``event``, asked at the turn's time ``now``."""

    kind: JobKind
    event: EventScope
    now: float
    user: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Work that needs no record: a step compaction's text and key, a profile's count.
    payload: dict[str, Any] = field(default_factory=dict)
    owner: str = ""
    holder: Holder | None = None
    #: A reflection's model answer and the ids of the memories it was shown.
    plan: dict[str, Any] | None = None
    #: A reflection's windows counted back from ``now``: 1; 0 for a retry of ``ends``
    #: alone; more in a record an older version wrote after its job took the place of
    #: waiting ones.
    span: int = 1
    #: The turn times of the earlier windows a reflection shows as well, oldest first:
    #: those of the waiting ones it took the place of, and of failed ones (it shows what
    #: each of them would have shown, and no window between them twice).
    ends: tuple[float, ...] = ()

    @property
    def durable(self) -> bool:
        return self.kind in DURABLE

    @property
    def resumed(self) -> bool:
        """Found again in the store and taken over: it may have done part of its work."""
        return bool(self.payload.get("resumed"))

    @property
    def key(self) -> str:
        # The time first: jobs found again after a crash run in the order they were asked.
        return f"{self.now:020.6f}:{self.id}"

    @property
    def slot(self) -> tuple[str, tuple[tuple[str, str], ...]] | None:
        """Jobs of one slot coalesce while they wait (the newest covers the older); None
        for a job that must run as it is (a step summary, a reflection with a plan)."""
        if self.kind == "compaction" or self.plan is not None:
            return None
        return (self.kind, tuple(sorted(self.event.history.items())))

    def held_by(self, holder: Holder | None) -> Job:
        return replace(self, holder=holder)

    def with_plan(self, plan: dict[str, Any]) -> Job:
        """This job with ``plan``; ``JobRecordError`` when its record would leave no room
        for what another holder's taking it over adds (a takeover, a renewal and a
        release write up to what ``loads`` takes)."""
        planned = replace(self, plan=plan)
        if len(text := planned.dumps()) > (most := _MAX_RECORD - _HOLDER_ROOM):
            raise JobRecordError(
                f"the job's record would have {len(text)} characters, more than the "
                f"{most} a record may have: its model answer is too long to keep"
            )
        return planned

    def taken_over(self, event: EventScope, owner: str, holder: Holder) -> Job:
        """This job, found again, as ``owner``'s to resume under ``holder`` (its plan,
        windows and count kept; ``event`` as the owner's scopes see it)."""
        return Job(
            self.kind,
            event,
            self.now,
            id=self.id,
            owner=owner,
            holder=holder,
            plan=self.plan,
            payload={"resumed": True},
            span=self.span,
            ends=self.ends,
        )

    def dumps(self) -> str:
        """The record's text; raises ``JobRecordError`` when it would be longer than
        ``loads`` takes (an answer kept as the plan, written with every non-ASCII
        character escaped, can be), so that no job is kept that nobody can resume."""
        e = self.event
        text = json.dumps(
            {
                "v": _VERSION,
                "kind": self.kind,
                "now": self.now,
                "id": self.id,
                "owner": self.owner,
                "holder": None if self.holder is None else self.holder.as_dict(),
                "event": {
                    "source": e.source,
                    "contact": e.contact,
                    "room_id": e.room_id,
                    "name": e.name,
                    "fields": e.fields,
                },
                "plan": self.plan,
                # Every window: what an older version, which reads no "ends", counts back.
                "span": self.span + len(self.ends),
                "ends": list(self.ends),
            }
        )
        if len(text) > _MAX_RECORD:
            raise JobRecordError(
                f"the job's record would have {len(text)} characters, more than the "
                f"{_MAX_RECORD} a record may have: its model answer is too long to keep"
            )
        return text

    @classmethod
    def loads(cls, text: object) -> Job:
        """The job a record holds; ``JobRecordError`` naming what is wrong otherwise.

        The event is as recorded; ``resolved`` gives it as an agent's scopes see it.
        """
        if not isinstance(text, str) or len(text) > _MAX_RECORD:
            raise JobRecordError("a job record must be a JSON text of at most 1 MiB")
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise JobRecordError(f"a job record is not JSON: {e}") from None
        if not isinstance(d, dict) or d.get("v") != _VERSION:
            raise JobRecordError(f"not an upkeep job record of version {_VERSION}")
        kind = d.get("kind")
        if kind not in DURABLE:
            raise JobRecordError(f"a recorded job's kind must be one of {sorted(DURABLE)}")
        now = d.get("now")
        if not finite(now):
            raise JobRecordError("a recorded job's 'now' must be a finite number")
        jid = _text(d.get("id"), "id", 64)
        owner = _text(d.get("owner"), "owner", 64)
        ev = d.get("event")
        if not isinstance(ev, dict):
            raise JobRecordError("a recorded job's 'event' must be an object")
        source = _text(ev.get("source"), "event.source", _EVENT_TEXT)
        contact = _text(ev.get("contact"), "event.contact", _EVENT_TEXT)
        room = ev.get("room_id")
        if room is not None:
            room = _text(room, "event.room_id", _EVENT_TEXT)
        name = ev.get("name")
        if name is not None:
            name = _text(name, "event.name", _EVENT_TEXT)
        fields = ev.get("fields")
        if not isinstance(fields, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in fields.items()
        ):
            raise JobRecordError("a recorded job's 'event.fields' must map str to str")
        event = EventScope(dict(fields), contact, contact, source, room, "per-peer", name)
        span = d.get("span", 1)
        # Up to what a version before the limit held for ends as well could write: such
        # a record shows its newest windows.
        if isinstance(span, bool) or not isinstance(span, int) or not 1 <= span < 2 * MAX_SPAN:
            raise JobRecordError(
                f"a recorded job's 'span' must be an int from 1 to {2 * MAX_SPAN - 1}"
            )
        ends = _ends(d.get("ends"))
        span -= len(ends)
        if not 0 <= span <= MAX_SPAN:
            raise JobRecordError(
                f"a recorded job's 'span' must count its 'ends' and at most {MAX_SPAN} more"
            )
        # Its newest windows, said once by the version that wrote it (a scan reads a
        # record every minute): no warning here.
        ends = ends[max(len(ends) - (MAX_SPAN - max(span, 1)), 0) :]
        return cls(
            kind,
            event,
            float(now),
            None,
            jid,
            owner=owner,
            holder=_holder(d.get("holder")),
            plan=_plan(d.get("plan")),
            span=span,
            ends=ends,
        )

    def resolved(self, scopes: SessionScope) -> EventScope:
        """The recorded event as ``scopes`` resolves it (source, contact and chat as the
        platform gave them); ``JobRecordError`` when the record's scope is not that
        one: a record cannot send a job to a scope the agent would not give the contact."""
        e = self.event
        src, _, contact_id = e.contact.partition(":")
        chat = None
        if e.room_id is not None:
            room_src, _, chat = e.room_id.partition(":")
            if room_src != src:
                raise JobRecordError("a recorded job's room is not on its contact's platform")
        if src != e.source or not contact_id:
            raise JobRecordError("a recorded job's contact is not on its source")
        try:
            event = scopes.resolve(src, contact_id, chat, name=e.name)
        except InvalidArgumentError as err:
            raise JobRecordError(f"a recorded job's event does not resolve: {err}") from None
        if event.fields != e.fields or event.room_id != e.room_id:
            raise JobRecordError("a recorded job's scope is not the one its contact resolves to")
        return event


def _text(value: object, label: str, limit: int) -> str:
    try:
        return record_text(value, label, limit)
    except InvalidArgumentError as e:
        raise JobRecordError(f"a recorded job's {e}") from None


def _ends(value: object) -> tuple[float, ...]:
    if value is None:
        return ()
    if (
        not isinstance(value, list)
        or len(value) >= MAX_SPAN
        or not all(finite(e) for e in value)
        or value != sorted(value)
    ):
        raise JobRecordError(
            f"a recorded job's 'ends' must list at most {MAX_SPAN - 1} times, oldest first"
        )
    return tuple(float(e) for e in value)


def _holder(value: object) -> Holder | None:
    if value is None:
        return None
    try:
        return Holder.loads(value)
    except InvalidArgumentError as e:
        raise JobRecordError(f"a recorded job's {e}") from None


def _plan(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise JobRecordError("a recorded job's 'plan' must be an object")
    raw, shown = value.get("raw"), value.get("shown")
    if not isinstance(raw, str):
        raise JobRecordError("a recorded job's plan must hold the model's answer as text")
    if not isinstance(shown, list) or not all(isinstance(i, str) and i for i in shown):
        raise JobRecordError("a recorded job's plan must list the ids it was shown")
    plan = {"raw": raw, "shown": list(shown), "versions": value.get("versions")}
    categories = value.get("categories")
    if categories is not None:  # a plan kept before categories were: the resumer's
        if not isinstance(categories, list) or not all(
            isinstance(c, str) and c for c in categories
        ):
            raise JobRecordError("a recorded job's plan must list its categories as text")
        plan["categories"] = list(categories)
    # The versions shown are read, and checked, by reflection itself (``_versions``).
    return plan
