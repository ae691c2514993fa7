"""Durable jobs kept with a store: work that a caller accepted and has yet to do (the
agent layer's background upkeep), written in the store's own transactions so that a
process killed before the work ends finds it at the next open, on either backend.

Jobs are the tenant's (``tenant_meta``): on a PostgreSQL connection bound to a tenant
(``?tenant=``), the book holds that tenant's jobs alone, and no key or value written
here reaches another tenant's; a connection bound to none has a book of its own."""

from __future__ import annotations

from collections.abc import Callable

from memlane import coerce
from memlane.errors import InvalidArgumentError
from memlane.storage import Store

__all__ = ["JobBook"]

_PREFIX = "job:"
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
        with self._db.transaction() as conn:
            self._db.set_tenant_meta(conn, _PREFIX + key, value)

    def swap(self, key: str, old: str, new: str) -> bool:
        """Replaces job ``key`` by ``new`` if it is ``old`` now (False: it changed or went
        meanwhile), in one write: how a worker takes a job over."""
        self._check_open()
        _check_key(key)
        _check(old, "value")
        _check(new, "value")
        with self._db.transaction() as conn:
            return self._db.swap_tenant_meta(conn, _PREFIX + key, old, new)

    def drop(self, key: str) -> None:
        """Forgets job ``key`` (done, or given up); no error if there is none."""
        self._check_open()
        _check_key(key)
        with self._db.transaction() as conn:
            self._db.delete_tenant_meta(conn, _PREFIX + key)

    def items(self) -> list[tuple[str, str]]:
        """Every job recorded and not dropped, as (key, value), in key order."""
        self._check_open()
        return [(k[len(_PREFIX) :], v) for k, v in self._db.tenant_meta_items(_PREFIX)]

    def __repr__(self) -> str:
        return "JobBook()"


def _check(value: object, label: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"a job's {label} must be a non-empty str, got {value!r}")
    coerce.clean(value, f"a job's {label}")


def _check_key(key: object) -> None:
    _check(key, "key")
    assert isinstance(key, str)
    if len(key) > MAX_KEY:
        raise InvalidArgumentError(
            f"a job's key must be at most {MAX_KEY} characters, got {len(key)}"
        )
