"""What an add stores and what it recognises as a duplicate.

Three kinds, checked in this order for each item (caller holds the write lock):
the dedup window (a repeated ``messageId``, ``eventId`` or ``statusMessageId``,
or source + contact + text, within ``dedup_window`` seconds), then for
``unique=True`` items an exact duplicate (same normalised text, table and scope)
and a near-duplicate (cosine at least ``threshold`` with a record of the same
table and scope, stored or earlier in the batch). The stored near-duplicates of
the whole batch come from one engine call, and the batch's own pairs from one
matrix product per scope.

The window's keys (OrcBot's semantics): the same ``metadata["messageId"]`` (or
``message_id``), ``metadata["eventId"]`` or ``metadata["statusMessageId"]``, each a key
of its own, so a redelivered event is one memory even if its text differs; or the same
``metadata["source"]`` and contact (``metadata["sourceId"]`` or ``metadata["contact"]``)
with the same text, so a contact's other messages are never skipped.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from memlane._core import Engine
from memlane._memory.access import AccessLog
from memlane._memory.encoding import NewRecord, record
from memlane._memory.querying import unexpired, visible
from memlane.coerce import FloatArray
from memlane.errors import ConflictError
from memlane.records import SCOPE_FIELDS, MemoryRecord
from memlane.schema import Row
from memlane.storage import Store

#: A duplicate's target: a stored record's id, or the index of an item of the batch.
Target = str | int
# Rows of the batch's similarity matrix computed at once.
_BLOCK = 1024

#: Metadata fields that name one delivery, and the window key kind of each. Both
#: spellings of a message id share the kind "message", the key stores have written
#: since the window began.
_ID_KEYS = (
    ("messageId", "message"),
    ("message_id", "message"),
    ("eventId", "eventId"),
    ("statusMessageId", "statusMessageId"),
)
#: Metadata fields naming the contact a message came from (OrcBot's ``sourceId``).
_CONTACT_KEYS = ("sourceId", "contact")
# Keys longer than this are kept as their digest (``_bounded``).
_KEY_CHARS = 512
#: A key kind earlier versions wrote for ``sourceId`` (taken then as an event id): a
#: store's remembered keys of this kind are derived again at open (``legacy_key``).
_LEGACY_KIND = "sourceId"


def window_keys(scope_key: Sequence[Any], metadata: Mapping[str, Any], digest: str) -> list[str]:
    """The keys (JSON strings) under which a record is remembered by ``DedupWindow``."""
    keys: list[str] = []
    for name, kind in _ID_KEYS:
        value = metadata.get(name)
        if value is not None:
            key = _bounded(json.dumps([kind, list(scope_key), str(value)]))
            if key not in keys:
                keys.append(key)
    source = metadata.get("source")
    if source is not None:
        for name in _CONTACT_KEYS:
            contact = metadata.get(name)
            if contact is not None:
                parts = ["source", list(scope_key), str(source), str(contact), digest]
                key = _bounded(json.dumps(parts))
                if key not in keys:
                    keys.append(key)
    return keys


def _bounded(key: str) -> str:
    """``key``, or its digest once longer than ``_KEY_CHARS``: the ``recent`` table's
    index holds PostgreSQL entries of at most about 2.7 kB, and a key holds scope values
    and message ids of any length."""
    if len(key) <= _KEY_CHARS:
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()  # ASCII: json.dumps escapes


def legacy_key(key: str) -> bool:
    """Whether ``key`` is of the kind earlier versions wrote for ``sourceId``: such a key
    must not be matched (it would skip a contact's every later message) but replaced by
    the record's ``window_keys``."""
    return key.startswith(f'["{_LEGACY_KIND}",')


class DedupWindow:
    """Remembers recently added records under their ``window_keys`` for ``seconds``.

    A key matches while its own age (``now - at``) is in ``[0, seconds]``, whatever the
    order keys were remembered in: a writer reads ``at`` before it embeds, so keys do not
    arrive in time order, and expiry goes by time (a heap), not by insertion. A wall clock
    stepped back (NTP) leaves keys stamped ahead of it: their age is unknown, so they are
    dropped at the next look (a repeated message is stored again rather than lost)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._entries: dict[str, tuple[str, float]] = {}
        # Each record's keys, so that forgetting records costs their keys alone (a
        # consolidation forgets its every entry under the write lock).
        self._keys: dict[str, set[str]] = {}
        self._times: list[tuple[float, str]] = []  # a heap of (at, key); stale pairs skipped
        self._latest = -math.inf
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        if self._latest > now:  # the clock stepped back: what it stamped ahead goes
            self._entries = {k: v for k, v in self._entries.items() if v[1] <= now}
            self._keys = {}
            for k, (rid, _) in self._entries.items():
                self._keys.setdefault(rid, set()).add(k)
            self._times = [(at, k) for k, (_, at) in self._entries.items()]
            heapq.heapify(self._times)
            self._latest = max((at for at, _ in self._times), default=-math.inf)
        cutoff = now - self.seconds
        while self._times and self._times[0][0] < cutoff:
            at, key = heapq.heappop(self._times)
            entry = self._entries.get(key)
            if entry is not None and entry[1] == at:
                del self._entries[key]
                self._unlink(entry[0], key)

    def _unlink(self, record_id: str, key: str) -> None:
        keys = self._keys.get(record_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._keys[record_id]

    def find(self, keys: list[str], now: float | None = None) -> str | None:
        """The id of a record remembered under any of ``keys`` within the window."""
        if self.seconds <= 0 or not keys:
            return None
        now = time.time() if now is None else now
        with self._lock:
            self._expire(now)
            for key in keys:
                hit = self._entries.get(key)
                if hit is not None and 0 <= now - hit[1] <= self.seconds:
                    return hit[0]
        return None

    def remember(self, keys: list[str], record_id: str, at: float | None = None) -> None:
        if self.seconds <= 0 or not keys:
            return
        at = time.time() if at is None else at
        with self._lock:
            for key in keys:
                old = self._entries.get(key)
                if old is not None and old[0] != record_id:
                    self._unlink(old[0], key)
                self._entries[key] = (record_id, at)
                self._keys.setdefault(record_id, set()).add(key)
                heapq.heappush(self._times, (at, key))
            self._latest = max(self._latest, at)

    def forget(self, record_ids: Iterable[str]) -> None:
        """Drops the keys of ``record_ids`` (deleted records), each record's keys alone."""
        with self._lock:
            for record_id in record_ids:
                for key in self._keys.pop(record_id, ()):
                    del self._entries[key]


@dataclass(slots=True)
class Decision:
    """Which items to store, which not (index -> kind, target), and which near-duplicates
    are stored marked (index -> target)."""

    store: list[int] = field(default_factory=list)
    dups: dict[int, tuple[str, Target]] = field(default_factory=dict)
    marks: dict[int, Target] = field(default_factory=dict)
    #: The rows of the stored records found exact duplicates of, by id, as read: what
    #: the add returns for them if another process deletes one before it is read again.
    read: dict[str, Row] = field(default_factory=dict)


def load_window(window: DedupWindow, db: Store, now: float) -> None:
    """Fills ``window`` with the keys the store remembers from its last ``window.seconds``.

    A key of the kind earlier versions wrote for ``sourceId`` is replaced by its record's
    keys as ``window_keys`` derives them now (the record's source +
    contact + text), so an old store does not skip a contact's later messages."""
    legacy: dict[str, float] = {}
    for key, record_id, at in db.recent(now - window.seconds):
        if legacy_key(key):
            legacy[record_id] = max(at, legacy.get(record_id, at))
        else:  # a key stored whole by an earlier version is remembered as kept now
            window.remember([_bounded(key)], record_id, at)
    for record_id, at in legacy.items():
        row = db.row_by_id(record_id)
        if row is None:
            continue
        rec = record(row, None)
        scope = (rec.table, *(getattr(rec, f) for f in SCOPE_FIELDS))
        window.remember(window_keys(scope, rec.metadata, row.content_hash), record_id, at)


def scope_filter(
    table: str, scope: Sequence[str | None], live: float | None = None
) -> dict[str, Any]:
    """Exactly this table and scope: unset scope fields must be unset; with ``live``,
    only the records not expired then."""
    conds: list[dict[str, Any]] = [{"table": table}]
    for f, v in zip(SCOPE_FIELDS, scope, strict=True):
        conds.append({f: v} if v is not None else {f: {"$exists": False}})
    flt = {"$and": conds}
    return flt if live is None else unexpired(flt, live)


def decide(
    news: list[NewRecord],
    now: float,
    *,
    db: Store,
    engine: Engine,
    window: DedupWindow,
    threshold: float,
    near_duplicate: Literal["mark", "skip"],
    expiring: bool,
) -> Decision:
    """What to store of ``news`` at ``now``: a record expired by then is no duplicate
    (``expiring``: whether any record of the store may have)."""
    out = Decision()
    wanted = [n.content_hash for n in news if n.dedup]
    if not wanted and not any(n.metadata for n in news):
        out.store = list(range(len(news)))  # nothing to check: a bulk load
        return out
    stored = _exact(db.rows_by_hash(wanted), now) if wanted else {}
    out.read.update((row.id, row) for row in stored.values())
    exact: dict[tuple[Any, ...], Target] = {key: row.id for key, row in stored.items()}
    live = now if expiring else None
    stored_near, batch_near = (
        _near_candidates(news, db, engine, threshold, live) if wanted else ({}, {})
    )
    window_batch: dict[str, int] = {}
    kept: set[int] = set()
    for i, n in enumerate(news):
        # The pieces of one text (an agent splits one too long) are never each other's
        # duplicates: a passage it repeats is still part of it.
        group = _group(n)
        other = _apart(news, group)
        skey = n.scope_key
        wkeys = window_keys(skey, n.metadata, n.content_hash)
        seen = window.find(wkeys, now)
        if seen is not None and not visible(db.row_by_id(seen), now):
            # Deleted in bulk (delete_all, prune) after the window saw it, or expired.
            window.forget([seen])
            seen = None
        found: Target | None = seen
        if found is None:
            found = next(
                (window_batch[k] for k in wkeys if k in window_batch and other(window_batch[k])),
                None,
            )
        if found is not None:
            out.dups[i] = ("window", found)
            continue
        if n.dedup:
            ekey = (n.content_hash, *skey)
            if ekey in exact and other(exact[ekey]):
                out.dups[i] = ("exact", exact[ekey])
                continue
            # The first earlier item of the batch that was stored, else a stored record.
            near: Target | None = next(
                (j for j in batch_near.get(i, ()) if j in kept and other(j)), None
            )
            if near is None:
                near = stored_near.get(i)
            if near is not None and near_duplicate == "skip":
                out.dups[i] = ("near", near)
                continue
            if near is not None:
                out.marks[i] = near
            n.unique = near is None
        # Any item stored is what a later unique=True item of the batch duplicates,
        # as a stored record would be.
        exact.setdefault((n.content_hash, *skey), i)
        for k in wkeys:
            window_batch[k] = i
        kept.add(i)
        out.store.append(i)
    return out


def results(
    db: Store, access: AccessLog, news: list[NewRecord], decision: Decision
) -> dict[int, MemoryRecord]:
    """What an add returns for each of ``news``, by index: the record stored, or the one
    ``decision`` found it duplicates (read now, with the accesses ``access`` holds)."""
    out: dict[int, MemoryRecord] = {}
    for i in decision.store:
        rec = out[i] = news[i].record()
        if i in decision.marks:
            target = decision.marks[i]
            rec.duplicate = "near"
            rec.duplicate_of = news[target].id if isinstance(target, int) else target
    for i, (kind, target) in decision.dups.items():
        if isinstance(target, int):
            rec = replace(out[target])
        else:
            # On PostgreSQL another process may have deleted it since: as read then.
            row = db.row_by_id(target) or decision.read.get(target)
            if row is None:
                raise ConflictError(
                    f"memory {target!r}, which an item duplicates, was deleted by another "
                    "writer meanwhile; the items that duplicate nothing were stored"
                )
            rec = record(row, access.get(row))
        rec.duplicate, rec.duplicate_of = kind, rec.id
        out[i] = rec
    return out


def _group(n: NewRecord) -> object:
    """The text ``n`` is a piece of (its metadata's ``split_group``), if any."""
    return n.metadata.get("split_group") if n.metadata else None


def _apart(news: list[NewRecord], group: object) -> Callable[[Target], bool]:
    """Whether a target may be duplicated by an item of ``group``: not another piece of it."""
    if group is None:
        return lambda j: True
    return lambda j: not isinstance(j, int) or _group(news[j]) != group


def _exact(rows: Iterable[Row], now: float) -> dict[tuple[Any, ...], Row]:
    """The first of ``rows`` true and visible at ``now``, by content hash, table and scope
    fields: what a ``unique`` item of that text and scope duplicates."""
    out: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        if row.valid_to is None and visible(row, now):  # else no longer true, or gone
            out.setdefault((row.content_hash, row.tbl, *row[5:11]), row)
    return out


def stored_since(
    decision: Decision, news: list[NewRecord], rows: Iterable[Row], now: float
) -> set[int]:
    """The items ``decision`` stores that are now exact duplicates of ``rows`` (read in
    the write transaction: what another process stored after ``decide`` read), moved to
    its duplicates; an item that named one as its target names the stored record now."""
    exact = _exact(rows, now)
    decision.read.update((row.id, row) for row in exact.values())
    late = {
        i: found.id
        for i in decision.store
        if news[i].dedup
        and (found := exact.get((news[i].content_hash, *news[i].scope_key))) is not None
    }
    if late:
        decision.store = [i for i in decision.store if i not in late]
        for i, (kind, target) in list(decision.dups.items()):
            if isinstance(target, int) and target in late:
                decision.dups[i] = (kind, late[target])
        for i, target in list(decision.marks.items()):
            if isinstance(target, int) and target in late:
                decision.marks[i] = late[target]
        decision.dups.update((i, ("exact", found)) for i, found in late.items())
    return set(late)


def stored_meanwhile(
    db: Store,
    decision: Decision,
    news: list[NewRecord],
    order: list[int],
    recent: list[tuple[str, str, float]],
) -> Callable[[Any], set[int]] | None:
    """What a write of ``news[i] for i in order`` asks in its transaction, on PostgreSQL,
    where ``decision`` stores a ``unique`` item: the positions of those another process
    stored after ``decide`` read (``stored_since``), left out of the write and of
    ``recent``. Its writers take the seq row in turn, so the transaction reads every
    commit before its own."""
    if not db.shared or not any(news[i].dedup for i in order):
        return None

    def late(conn: Any) -> set[int]:
        rows = db.rows_by_hash([news[i].content_hash for i in order if news[i].dedup], conn)
        dups = stored_since(decision, news, rows, time.time())
        ids = {news[i].id for i in dups}
        recent[:] = [r for r in recent if r[1] not in ids]
        return {p for p, i in enumerate(order) if i in dups}

    return late


def _near_candidates(
    news: list[NewRecord], db: Store, engine: Engine, threshold: float, live: float | None
) -> tuple[dict[int, str], dict[int, list[int]]]:
    """For each ``unique`` item with a vector: the stored record at least ``threshold``
    similar (by id), not expired at ``live`` (if given), and the earlier items of the
    batch in its table and scope that are (by index, in order)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, n in enumerate(news):
        if n.embedding is not None:
            groups.setdefault(n.scope_key, []).append(i)
    checked = [i for i, n in enumerate(news) if n.dedup and n.embedding is not None]
    if not checked:
        return {}, {}
    keys = list(groups)
    group_of = {i: g for g, key in enumerate(keys) for i in groups[key]}
    vectors = np.stack([news[i].embedding for i in checked])  # type: ignore[misc]
    ids, _ = engine.nearest(
        vectors,
        [group_of[i] for i in checked],
        [scope_filter(key[0], key[1:], live) for key in keys],
        threshold,
    )
    hit = {i: int(r) for i, r in zip(checked, ids.tolist(), strict=True) if r != 2**64 - 1}
    rows = db.rows_by_rowid(sorted(set(hit.values()))) if hit else {}
    stored = {i: rows[r].id for i, r in hit.items() if r in rows}

    batch: dict[int, list[int]] = {}
    for members in groups.values():
        if len(members) < 2 or not any(news[i].dedup for i in members):
            continue
        units = _units(np.stack([news[i].embedding for i in members]))  # type: ignore[misc]
        dedup = np.fromiter((news[i].dedup for i in members), dtype=bool, count=len(members))
        for start in range(0, len(members), _BLOCK):
            stop = min(start + _BLOCK, len(members))
            # Row r (item start + r) against every earlier item of the group.
            mask = units[start:stop] @ units[:stop].T >= threshold
            mask &= np.arange(stop)[None, :] < np.arange(start, stop)[:, None]
            mask &= dedup[start:stop, None]
            pairs = np.nonzero(mask)
            for r, c in zip(pairs[0].tolist(), pairs[1].tolist(), strict=True):
                batch.setdefault(members[start + r], []).append(members[c])
    return stored, batch


def _units(vectors: FloatArray) -> FloatArray:
    units: FloatArray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return units
