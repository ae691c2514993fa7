"""The memlane records a LangGraph item is stored as (``memlane.integrations.langgraph``):
one per indexed text, the first holding the item."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.store.base import PutOp

from memlane.errors import InvalidArgumentError, shown
from memlane.integrations._langgraph_filters import prefixes

__all__ = ["item_records"]


def item_records(
    item: str,
    op: PutOp,
    texts: list[str],
    vectors: Sequence[Sequence[float]] | None,
    placeholder: Any,
    now: float,
    fields: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The memlane items (without ids) that store the put ``op`` of ``item``: one per
    indexed text of ``texts`` with its vector of ``vectors``, or (nothing indexed) one of
    the value's JSON text with the ``placeholder`` vector, never searched. ``fields``
    go on each (table, scope, ``created_at``).

    Only the first holds the value, key and namespace, which a read takes from it; every
    one holds the ``prefixes`` of the namespace (a 32-character digest per label, for
    prefix searches), the others besides only what a semantic search reads of them, so
    the value and the namespace's labels are stored once, whatever the number of texts."""
    assert op.value is not None
    value = dict(op.value)
    pre = prefixes(op.namespace)
    lg: dict[str, Any] = {
        "item": item,
        "ns": list(op.namespace),
        "pre": pre,
        "key": op.key,
        "value": value,
        "n": max(1, len(texts)),
        "vec": bool(texts),
        "u": now,
    }
    common = dict(fields)
    if op.ttl is not None:
        lg["ttl"] = float(op.ttl)  # minutes, for a refresh
        common["ttl"] = float(op.ttl) * 60  # memlane's is in seconds
    out = []
    for i, text in enumerate(texts or [_json_text(value, op.key)]):
        # Every record holds the prefixes' digests (fixed size): a namespace narrows the
        # engine's search over all of them.
        part = {**lg, "part": 0} if i == 0 else {"item": item, "part": i, "vec": True, "pre": pre}
        record: dict[str, Any] = {"text": text, "metadata": {"lg": part}, **common}
        if vectors is not None:
            record["embedding"] = vectors[i]
        elif not texts and placeholder is not None:
            record["embedding"] = placeholder  # never searched: "vec" is False
        out.append(record)
    return out


def _json_text(value: Any, key: str) -> str:
    """An item's value as the text a search reads when no field of it is indexed."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as e:
        reason = "it is nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise InvalidArgumentError(
            f"the value of {shown(key)} must be JSON (a dict of JSON values): {reason}"
        ) from None
