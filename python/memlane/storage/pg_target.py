"""A PostgreSQL store's URL: what libpq gets of it, the options that are memlane's own
(``schema``, ``row_cache``, ``tenant``), and a form that can be shown (no password)."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from memlane import coerce
from memlane.errors import InvalidArgumentError, shown
from memlane.records import SCOPE_FIELDS
from memlane.storage.rowcache import DEFAULT_CAPACITY

__all__ = ["DEFAULT_SCHEMA", "PostgresTarget"]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")
DEFAULT_SCHEMA = "memlane"
# A tenant's value is part of the keys of its ids and entries, which an index holds
# (at most about 2.7 kB a key).
_TENANT_MAX = 256


@dataclass(frozen=True, slots=True)
class PostgresTarget:
    """A parsed store URL: what libpq gets, the schema, and a printable form."""

    conninfo: str
    schema: str
    row_cache: int
    #: (scope field, value) the database confines this connection to, or None.
    tenant: tuple[str, str] | None
    redacted: str
    secrets: tuple[str, ...]

    @classmethod
    def parse(cls, url: str) -> PostgresTarget:
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError as e:
            raise InvalidArgumentError(f"not a valid PostgreSQL URL: {e}") from None
        secrets = [] if parts.password is None else [urllib.parse.unquote(parts.password)]
        schema = DEFAULT_SCHEMA
        # Records kept in process for reading search hits (0: none).
        row_cache = str(DEFAULT_CAPACITY)
        tenant: tuple[str, str] | None = None
        keep: list[tuple[str, str]] = []
        # schema, row_cache and tenant are memlane's; everything else is libpq's.
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key == "schema":
                schema = value
            elif key == "row_cache":
                row_cache = value
            elif key == "tenant":
                field, sep, who = value.partition(":")
                if not sep or field not in SCOPE_FIELDS or not who:
                    raise InvalidArgumentError(
                        f"tenant must be FIELD:VALUE with FIELD one of {list(SCOPE_FIELDS)}, "
                        f"got {shown(value)}"
                    )
                coerce.clean(who, "the tenant")
                if len(who) > _TENANT_MAX:
                    raise InvalidArgumentError(
                        f"the tenant must be at most {_TENANT_MAX} characters, got {len(who)}"
                    )
                tenant = (field, who)
            else:
                if key == "password":
                    secrets.append(value)
                keep.append((key, value))
        if not _SCHEMA_NAME.fullmatch(schema):
            raise InvalidArgumentError(
                f"schema must be a lowercase identifier of at most 48 characters "
                f"([a-z_][a-z0-9_]*), got {shown(schema)}"
            )
        if not row_cache.isdigit():
            raise InvalidArgumentError(f"row_cache must be an int >= 0, got {shown(row_cache)}")
        # Rebuilt by hand: urlunsplit would turn "postgresql:///db" into "postgresql:/db".
        base = f"{parts.scheme}://{parts.netloc}{parts.path}"
        conninfo = base + ("?" + urllib.parse.urlencode(keep) if keep else "")
        netloc = parts.netloc.rpartition("@")[2]
        if parts.username is not None:
            netloc = f"{parts.username}{':***' if parts.password is not None else ''}@{netloc}"
        public = [(k, "***" if k == "password" else v) for k, v in keep]
        if tenant is not None:
            public.append(("tenant", ":".join(tenant)))
        query = urllib.parse.urlencode([*public, ("schema", schema)], safe="*/:")
        redacted = f"postgresql://{netloc}{parts.path}?{query}"
        return cls(
            conninfo, schema, int(row_cache), tenant, redacted, tuple(s for s in secrets if s)
        )

    @property
    def id_prefix(self) -> str | None:
        """What the tenant's ids are stored behind (``user_id:alice/``), or None. The
        value is quoted, so no tenant's prefix begins another's."""
        if self.tenant is None:
            return None
        field, who = self.tenant
        return f"{field}:{urllib.parse.quote(who, safe='')}/"

    def scrub(self, text: str) -> str:
        """``text`` with the passwords (plain or URL-quoted) masked."""
        for secret in self.secrets:
            for form in {secret, urllib.parse.quote(secret, safe="")}:
                text = text.replace(form, "***")
        return text

    def __repr__(self) -> str:
        return f"PostgresTarget({self.redacted!r})"
