"""Durable jobs kept with a store: work that a caller accepted and has yet to do (the
agent layer's background upkeep), written in the store's own transactions so that a
process killed before the work ends finds it at the next open, on either backend.

The book also keeps what finished work cost and what failed (``JobOutcome``, the
newest ``OUTCOMES_KEPT``), so that another process (``memlane serve``'s inspector)
can show it.

Jobs are the tenant's (``tenant_meta``): on a PostgreSQL connection bound to a tenant
(``?tenant=``), the book holds that tenant's jobs alone, and no key or value written
here reaches another tenant's; a connection bound to none has a book of its own."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from memlane import coerce
from memlane.errors import InvalidArgumentError, MemlaneError, StorageError, shown
from memlane.storage import Store

__all__ = ["OUTCOMES_KEPT", "JobBook", "JobOutcome"]

_PREFIX = "job:"
_OUTCOME = "done:"
_MARK = "mark:"
#: The outcomes a book keeps: the newest, older ones are dropped as new ones come.
OUTCOMES_KEPT = 500
_ERROR_KEPT = 2000
#: The longest key (an index holds the tenant and the key: at most about 2.7 kB).
MAX_KEY = 256


class JobBook:
    """Named jobs (a key and a text, e.g. JSON) in the store, as ``Memory.jobs``."""

    def __init__(self, db: Store, check_open: Callable[[], None]) -> None:
        self._db = db
        self._check_open = check_open

    def put(self, key: str, value: str) -> None:
        """Records job ``key`` (replacing one of that key), durably before it returns."""
        self._check_open()
        _check_key(key)
        _check(value, "value")
        try:
            with self._db.transaction() as conn:
                self._db.set_tenant_meta(conn, _PREFIX + key, value)
        except StorageError as e:
            if self._after_failure(_PREFIX + key, e) != value:
                raise

    def swap(self, key: str, old: str, new: str, *, drop: tuple[str, str] | None = None) -> bool:
        """Replaces job ``key`` by ``new`` if it is ``old`` now (False: it changed or went
        meanwhile), in one write: how a worker takes a job over, and how its holder
        writes it again only while it holds it. ``drop``: a ``(key, value)`` forgotten
        in the same transaction if it holds that value (how a job takes the place of
        another: a crash between the two writes would lose what the other covered)."""
        self._check_open()
        _check_key(key)
        _check(old, "value")
        _check(new, "value")
        if drop is not None:
            _check_key(drop[0])
            _check(drop[1], "value")
        try:
            with self._db.transaction() as conn:
                if drop is not None:
                    self._drop_held(conn, _PREFIX + drop[0], drop[1])
                return self._db.swap_tenant_meta(conn, _PREFIX + key, old, new)
        except StorageError as e:
            now = self._after_failure(_PREFIX + key, e)
            if now == new:  # stored (with ``drop``: one transaction)
                return True
            if now == old:
                raise
            return False

    def drop(self, key: str, held: str | None = None) -> bool:
        """Forgets job ``key`` (done, or given up); no error if there is none. With
        ``held``: only if it is ``held`` now (False: it changed or went meanwhile),
        checked in the transaction that drops it, so a holder never drops a job that
        another process took over."""
        self._check_open()
        _check_key(key)
        if held is not None:
            _check(held, "value")
        try:
            with self._db.transaction() as conn:
                if held is not None:
                    return self._drop_held(conn, _PREFIX + key, held)
                self._db.delete_tenant_meta(conn, _PREFIX + key)
        except StorageError as e:
            now = self._after_failure(_PREFIX + key, e)
            if now is None:
                return True
            if held is None or now == held:
                raise
            return False
        return True

    def _after_failure(self, key: str, error: StorageError) -> str | None:
        """Entry ``key``'s value (None: none) after a write of it raised ``error``: a
        commit whose answer a lost connection took may have stored it, and a holder
        that took it for unwritten would take its own record for another's. ``error``
        again when the record cannot be read either."""
        try:
            return dict(self._db.tenant_meta_items(key)).get(key)
        except MemlaneError:
            raise error from None

    def _drop_held(self, conn: Any, key: str, held: str) -> bool:
        # Swapping the value for itself matches it in the statement that locks the row
        # (PostgreSQL), so no other writer changes it before the delete commits.
        if not self._db.swap_tenant_meta(conn, key, held, held):
            return False
        self._db.delete_tenant_meta(conn, key)
        return True

    def items(self) -> list[tuple[str, str]]:
        """Every job recorded and not dropped, as (key, value), in key order."""
        self._check_open()
        return [(k[len(_PREFIX) :], v) for k, v in self._db.tenant_meta_items(_PREFIX)]

    def set_mark(self, key: str, value: str) -> None:
        """Keeps ``value`` under ``key`` beside the jobs (replacing it), durably before it
        returns: what upkeep needs to know across processes, such as when a room last
        reflected. Marks are no jobs: ``items`` leaves them out."""
        self._check_open()
        _check_key(key)
        _check(value, "value")
        with self._db.transaction() as conn:
            self._db.set_tenant_meta(conn, _MARK + key, value)

    def mark(self, key: str) -> str | None:
        """The value kept under ``key`` by ``set_mark``, or None."""
        self._check_open()
        _check_key(key)
        found = dict(self._db.tenant_meta_items(_MARK + key))
        return found.get(_MARK + key)

    def take_mark(self, key: str, value: str, held: str | None = None) -> bool:
        """Sets mark ``key`` to ``value`` if it holds ``held`` now (None: if there is no
        such mark), checked in the statement that writes it, so of several processes
        taking one mark at once one does; whether this one did. A lease is taken so."""
        self._check_open()
        _check_key(key)
        _check(value, "value")
        if held is not None:
            _check(held, "value")
        try:
            with self._db.transaction() as conn:
                if held is None:
                    return self._db.add_tenant_meta(conn, _MARK + key, value)
                return self._db.swap_tenant_meta(conn, _MARK + key, held, value)
        except StorageError as e:
            now = self._after_failure(_MARK + key, e)
            if now == value:  # a commit whose answer was lost
                return True
            if now == held:
                raise
            return False

    def drop_mark(self, key: str, held: str) -> bool:
        """Forgets mark ``key`` if it holds ``held`` now (False: it changed or went)."""
        self._check_open()
        _check_key(key)
        _check(held, "value")
        try:
            with self._db.transaction() as conn:
                return self._drop_held(conn, _MARK + key, held)
        except StorageError as e:
            now = self._after_failure(_MARK + key, e)
            if now is None:
                return True
            if now == held:
                raise
            return False

    def record_outcome(self, outcome: JobOutcome) -> None:
        """Records what a piece of finished work cost and what failed, durably before it
        returns, and drops the oldest beyond ``OUTCOMES_KEPT``."""
        self._check_open()
        if not isinstance(outcome, JobOutcome):
            raise InvalidArgumentError(f"outcome must be a JobOutcome, got {shown(outcome)}")
        key = f"{_OUTCOME}{outcome.done_at:020.6f}:{uuid.uuid4().hex[:12]}"
        with self._db.transaction() as conn:
            self._db.set_tenant_meta(conn, key, outcome.dumps())
            self._db.trim_tenant_meta(conn, _OUTCOME, OUTCOMES_KEPT)

    def outcomes(self) -> list[JobOutcome]:
        """The outcomes kept, oldest first (an entry that is not one is left out)."""
        self._check_open()
        found = (JobOutcome.loads(v) for _, v in self._db.tenant_meta_items(_OUTCOME))
        return [o for o in found if o is not None]

    def __repr__(self) -> str:
        return "JobBook()"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """A piece of upkeep done: its ``kind``, when it was asked and when it ended (unix
    seconds), the model calls it made with their tokens in and out, and what failed,
    as ``(what, error)`` pairs (none: it succeeded)."""

    kind: str
    asked_at: float
    done_at: float
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    failures: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise InvalidArgumentError(
                f"an outcome's kind must be a non-empty str, got {shown(self.kind)}"
            )
        for label in ("asked_at", "done_at"):
            value = getattr(self, label)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise InvalidArgumentError(f"an outcome's {label} must be a finite number")
        for label in ("calls", "tokens_in", "tokens_out"):
            coerce.count(getattr(self, label), label)
        if not all(
            isinstance(f, tuple) and len(f) == 2 and all(isinstance(x, str) for x in f)
            for f in self.failures
        ):
            raise InvalidArgumentError("an outcome's failures must be (what, error) pairs of str")

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def cost(self, per_million_in: float, per_million_out: float) -> float:
        """The estimated cost at these prices (per million tokens in and out)."""
        return (self.tokens_in * per_million_in + self.tokens_out * per_million_out) / 1e6

    def dumps(self) -> str:
        d = asdict(self)
        # An error's message may quote a model's whole answer: the start says what it was.
        d["failures"] = [[what[:200], error[:_ERROR_KEPT]] for what, error in self.failures]
        return json.dumps(d)

    @classmethod
    def loads(cls, text: str) -> JobOutcome | None:
        """The outcome ``text`` holds (None: it holds none)."""
        try:
            d: Any = json.loads(text)
            d["failures"] = tuple(tuple(f) for f in d["failures"])
            return cls(**d)
        except (ValueError, TypeError, KeyError, RecursionError, InvalidArgumentError):
            return None


def _check(value: object, label: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"a job's {label} must be a non-empty str, got {shown(value)}")
    coerce.clean(value, f"a job's {label}")


def _check_key(key: object) -> None:
    _check(key, "key")
    assert isinstance(key, str)
    if len(key) > MAX_KEY:
        raise InvalidArgumentError(
            f"a job's key must be at most {MAX_KEY} characters, got {len(key)}"
        )
