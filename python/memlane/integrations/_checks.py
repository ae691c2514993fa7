"""The adapters' argument checks: each refuses what it cannot use with memlane's
``InvalidArgumentError``, naming the argument, before anything is read, embedded or
written."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from memlane import coerce
from memlane.errors import InvalidArgumentError, shown
from memlane.integrations._common import reserved_id_key

__all__ = [
    "MAX_FILTER_DEPTH",
    "MAX_K",
    "bound_options",
    "filter_depth",
    "id_list",
    "metadata_list",
    "text_list",
]

#: How deep a filter may nest: the engine refuses deeper ones (its filter parse's
#: ``MAX_DEPTH``, which Python does not see), and an adapter's own walk of a filter stops
#: there too, with the same error, before Python's recursion limit.
MAX_FILTER_DEPTH = 32
#: The largest ``k`` the engine's search takes (its ``MAX_K``): what an adapter fetches
#: beyond what it was asked for stays within it.
MAX_K = 1 << 24


def filter_depth(depth: int) -> None:
    """Refuses a filter nested deeper than the engine takes."""
    if depth > MAX_FILTER_DEPTH:
        raise InvalidArgumentError(f"filter is nested more than {MAX_FILTER_DEPTH} levels deep")


def _listed(value: object, label: str, what: str) -> None:
    """Refuses a str or bytes (whose items are characters) and anything not a sequence."""
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Sequence):
        raise InvalidArgumentError(f"{label} must be a list of {what}, got {shown(value)}")


def id_list(value: object, label: str, *, none_ok: bool = False) -> list[Any]:
    """``value`` as a list of ids: a list or tuple of str (and None where ``none_ok``:
    an add gives those a new id). A str is refused, not read as one id per character."""
    _listed(value, label, "str")
    assert isinstance(value, Sequence)
    for j, item in enumerate(value):
        if not isinstance(item, str) and not (none_ok and item is None):
            raise InvalidArgumentError(f"{label}[{j}] must be a str, got {shown(item)}")
    return list(value)


def text_list(value: object, label: str) -> list[str]:
    """``value`` as a list of texts, each checked as memlane's add checks a record's text
    (a non-empty str both databases can store). A str is refused, not read as one text per
    character; any other iterable is read once."""
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{label} must be a list of str, got {shown(value)}")
    out = list(value)
    for j, item in enumerate(out):
        coerce.text(item, f"{label}[{j}]")
    return out


def metadata_list(value: object, count: int, label: str) -> list[Mapping[str, Any]] | None:
    """``value`` as one metadata dict per text (None: none given), each checked as
    memlane's add checks a record's metadata."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        raise InvalidArgumentError(f"{label} must be a list of dicts (one per text), got a dict")
    _listed(value, label, "dicts (one per text)")
    assert isinstance(value, Sequence)
    if len(value) != count:
        raise InvalidArgumentError(f"{len(value)} {label} for {count} texts; give one per text")
    for j, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise InvalidArgumentError(f"{label}[{j}] must be a dict, got {shown(item)}")
        try:
            coerce.metadata(item)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{label}[{j}]: {e}") from None
        reserved_id_key(item, f"{label}[{j}]")
    return list(value)


def bound_options(
    options: Mapping[str, Any], bound: Mapping[str, Any], fixed: Collection[str]
) -> dict[str, Any]:
    """The keyword arguments of a ``Memory`` call an adapter makes: the caller's
    ``options`` with what the adapter is bound to (``bound``: its scope fields and table)
    over them.

    A bound field the caller names must have the bound value (the adapter never reads
    outside its scope); a scope field it is not bound to narrows the call, as in
    ``Memory.search``. Keywords the adapter sets itself (``fixed``) are refused, naming
    each."""
    out = dict(options)
    for key in fixed:
        if key in out:
            raise InvalidArgumentError(
                f"{key} is set by the adapter from its own arguments; it is not a keyword "
                "of this call"
            )
    for key, value in bound.items():
        if key in out and out[key] != value:
            raise InvalidArgumentError(
                f"{key}={shown(out[key])} is outside this adapter's scope ({key}={value!r}): "
                "it reads and writes only there"
            )
        out[key] = value
    return out
