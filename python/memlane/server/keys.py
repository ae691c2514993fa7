"""API keys and what each may do.

Keys come from the operator: ``--api-key`` (full access), ``$MEMLANE_API_KEY``, or a
keys file (JSON: a list of ``{"key": ..., "scope": {"user_id": "alice"}, "read_only":
true}``). A key's ``scope`` is not a default but a bound: the server sets those fields on
every request made with the key, refuses a request that names another value
(403 ``Forbidden``), and answers for a record outside it as for a missing one (404), so a
key for ``user_id=alice`` never reads or writes bob's memories. A ``read_only`` key may
only read (search included). A key is sent as ``Authorization: Bearer KEY`` (or
``X-API-Key: KEY``).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlane.errors import InvalidArgumentError, NotFoundError
from memlane.records import SCOPE_FIELDS, MemoryRecord
from memlane.server.errors import Refused

__all__ = ["ApiKey", "Caller", "load_keys"]

#: The shortest key accepted: a guessable key is no lock.
MIN_KEY_LENGTH = 16


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key and its limits (an empty scope: every record)."""

    secret: str = field(repr=False)
    scope: Mapping[str, str] = field(default_factory=dict)
    read_only: bool = False
    name: str = "key"

    def __post_init__(self) -> None:
        if not isinstance(self.secret, str) or len(self.secret) < MIN_KEY_LENGTH:
            raise InvalidArgumentError(
                f"{self.name}: an API key must be a string of at least {MIN_KEY_LENGTH} characters"
            )
        unknown = sorted(set(self.scope) - set(SCOPE_FIELDS))
        if unknown:
            raise InvalidArgumentError(
                f"{self.name}: a key's scope takes {', '.join(SCOPE_FIELDS)}, "
                f"not {', '.join(unknown)}"
            )
        if not all(isinstance(v, str) and v for v in self.scope.values()):
            raise InvalidArgumentError(f"{self.name}: scope values must be non-empty strings")
        if not isinstance(self.read_only, bool):
            raise InvalidArgumentError(f"{self.name}: read_only must be true or false")


def load_keys(path: str | Path) -> list[ApiKey]:
    """The keys of a keys file (see the module's docstring)."""
    where = Path(path)
    try:
        entries = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFoundError(f"no keys file at {where}") from None
    except (OSError, UnicodeError, json.JSONDecodeError) as e:
        raise InvalidArgumentError(f"{where}: not a JSON keys file ({e})") from None
    if not isinstance(entries, list):
        raise InvalidArgumentError(f"{where}: expected a JSON list of keys")
    keys = []
    for i, entry in enumerate(entries, 1):
        name = f"{where}: key {i}"
        if not isinstance(entry, dict) or set(entry) - {"key", "scope", "read_only"}:
            raise InvalidArgumentError(
                f"{name}: expected an object with key, and optionally scope and read_only"
            )
        scope = entry.get("scope") or {}
        if not isinstance(scope, dict):
            raise InvalidArgumentError(f"{name}: scope must be an object")
        keys.append(ApiKey(entry.get("key", ""), scope, entry.get("read_only", False), name))
    return keys


class Caller:
    """What one request may do: its key's limits, or everything (no keys configured)."""

    def __init__(self, key: ApiKey | None) -> None:
        self.scope: Mapping[str, str] = {} if key is None else key.scope
        self.read_only = False if key is None else key.read_only

    @staticmethod
    def of(headers: Mapping[str, str], keys: Sequence[ApiKey]) -> Caller:
        """The caller a request's headers name; 401 without a known key when keys are set."""
        if not keys:
            return Caller(None)
        given = headers.get("x-api-key")
        auth = headers.get("authorization", "")
        if given is None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if not given:
            raise Refused(
                401, "Unauthorized", "this server needs an API key (Authorization: Bearer KEY)"
            )
        found = None
        for key in keys:  # every key compared, in constant time each
            if hmac.compare_digest(key.secret.encode(), given.encode()):
                found = key
        if found is None:
            raise Refused(401, "Unauthorized", "unknown API key")
        return Caller(found)

    @property
    def scoped(self) -> bool:
        return bool(self.scope)

    def writes(self) -> None:
        if self.read_only:
            raise Refused(403, "Forbidden", "this API key is read-only")

    def unscoped(self, what: str) -> None:
        if self.scoped:
            raise Refused(403, "Forbidden", f"{what} needs a key not limited to a scope")

    def bound(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` (a request's arguments) with the key's scope set; 403 when it names
        another value for a field the key fixes."""
        out = dict(given)
        for f, value in self.scope.items():
            if out.get(f) is not None and out[f] != value:
                raise Refused(403, "Forbidden", f"this API key may not use {f}={out[f]!r}")
            out[f] = value
        return out

    def sees(self, record: MemoryRecord) -> bool:
        return all(getattr(record, f) == v for f, v in self.scope.items())
