"""Exact scopes: the records of one scope and not of the scopes below it.

A search or list given ``agent_id="a"`` also sees records stored with
``agent_id="a", user_id="u"``: a scope field left out is not a constraint. Core
memory blocks and long-term notes belong to exactly one scope (an agent's
persona is not a user's), so their reads and replacements add a filter that
the other scope fields are unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memlane import coerce
from memlane.errors import InvalidArgumentError
from memlane.records import SCOPE_FIELDS

if TYPE_CHECKING:
    from memlane._memory.store import MemoryStore

__all__ = ["exact_scope"]


def exact_scope(
    mem: MemoryStore, scope: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scope as stored (the store's ``default_scope`` under the fields given) and the
    filter that matches it exactly (every other scope field unset).

    The scope's values are str; it is typed Any because it is passed as ``**kwargs``
    to calls whose other keywords have other types."""
    if not isinstance(scope, Mapping):
        raise InvalidArgumentError(f"scope must be a dict of scope fields, got {scope!r}")
    unknown = set(scope) - set(SCOPE_FIELDS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown scope field(s) {sorted(map(str, unknown))}; scope fields are "
            f"{list(SCOPE_FIELDS)}"
        )
    full: dict[str, Any] = dict(mem.default_scope)
    for field, value in scope.items():
        if value is not None:
            full[field] = coerce.text(value, field)
    return full, {f: None for f in SCOPE_FIELDS if f not in full}
