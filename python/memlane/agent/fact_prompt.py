"""The fact check's exchange with its model: the prompt that shows new facts beside the
stored memories they may change, and the reading of the decisions it answers."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane.agent.llm import ChatMessage
from memlane.agent.parsing import ParseError, extract_json
from memlane.times import stamp

if TYPE_CHECKING:
    from memlane.records import MemoryRecord

__all__ = ["parse_decisions", "prompt"]

_DECISIONS = ("add", "update", "delete", "none")

_SYSTEM = (
    "You keep an AI agent's memory consistent. New facts were just learned. Compare each "
    "with the numbered memories already stored and decide what to do with it. Answer with "
    'one JSON object and nothing else: {"decisions": [{"fact": <letter of a new fact>, '
    '"decision": "add"|"update"|"delete"|"none", "memory": <number of a stored memory, for '
    'update, delete and none>, "reason": str}, ...]}, one decision per new fact.\n'
    "add: the fact is new information. update: the fact is a newer or more precise "
    "version of a stored memory (the same attribute of the same thing now has another "
    "value), which it replaces. delete: the fact shows a stored memory is no longer true "
    "and replaces nothing. none: the fact is already known (the memory that says it)."
)
#: Characters of a decision's reason kept.
_REASON_CHARS = 1000
#: A lone surrogate, which a JSON answer may hold ("\ud800") and no store can.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _label(i: int) -> str:
    return f"F{i + 1}"


def _line(rec: MemoryRecord) -> str:
    return f"[{stamp(rec.created_at, '%Y-%m-%d')}] {' '.join(rec.text.split())}"


def prompt(facts: Sequence[MemoryRecord], shown: Sequence[MemoryRecord]) -> list[ChatMessage]:
    listed = "\n".join(f"{i}. {_line(r)}" for i, r in enumerate(shown, 1))
    new = "\n".join(f"{_label(i)}. {_line(f)}" for i, f in enumerate(facts))
    return [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": f"Stored memories:\n{listed}\n\nNew facts:\n{new}"},
    ]


def parse_decisions(
    text: object, n_facts: int, n_shown: int
) -> dict[int, tuple[str, int | None, str]]:
    """Each fact's decision, the 0-based index of its memory and the reason, by the
    fact's 0-based index, from a model's answer; items that are not valid are left out.
    ``ParseError`` when the answer holds no list of decisions."""
    data: Any = extract_json(text)
    items = data.get("decisions")
    if not isinstance(items, list):
        raise ParseError("'decisions' must be a list", raw=text)
    out: dict[int, tuple[str, int | None, str]] = {}
    labels = {_label(i).lower(): i for i in range(n_facts)}
    for item in items:
        if not isinstance(item, Mapping):
            continue
        label = str(item.get("fact", "")).strip().lower()
        fact = labels.get(label if label.startswith("f") else f"f{label}")
        decision = item.get("decision")
        if fact is None or fact in out or not isinstance(decision, str):
            continue
        decision = decision.strip().lower()
        if decision not in _DECISIONS:
            continue
        reason = item.get("reason")
        # A lone surrogate (JSON's "\ud800") has no UTF-8 form: the store would refuse
        # the metadata that keeps the reason.
        reason = _SURROGATE.sub("\ufffd", reason.strip()) if isinstance(reason, str) else ""
        # Kept in the fact's metadata and its successor's: no model answer makes it long.
        reason = reason[:_REASON_CHARS] or "(none given)"
        index = item.get("memory")
        if isinstance(index, str):
            digits = index.strip()
            # ASCII digits: str.isdigit() admits "²" and "①", which int() refuses, and
            # int() refuses more than 4300 digits (no listed number has ten).
            ok = digits.isascii() and digits.isdecimal() and len(digits) < 10
            index = int(digits) if ok else None
        if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= n_shown:
            index = None
        if decision in ("update", "delete"):
            if index is None:
                continue
            out[fact] = (decision, index - 1, reason)
        elif decision == "none" and index is not None:  # the memory it repeats
            out[fact] = (decision, index - 1, reason)
        else:
            out[fact] = (decision, None, reason)
    return out
