"""Reflection: after a conversation, the LLM proposes remember / update / forget operations.

The relevant existing memories are shown to the model numbered 1, 2, 3, ...;
the model refers to them by those numbers, never by id, so it cannot invent
an id or touch a memory it was not shown. Its answer is parsed robustly (code
fences, prose around the JSON), each operation is validated on its own, the
valid ones are applied and the rest reported. An ``update`` supersedes the
memory (``memlane.Memory.supersede``): the corrected fact replaces the old
one in searches instead of sitting beside it, and the old one stays in the
memory's history and in searches ``as_of`` a time before the change. A ``forget``
deletes the memory only if it is still the version shown (its ``updated_at``, checked
inside the delete's transaction): a fact rewritten while the model answered was never
judged by it, and stays.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memlane import coerce
from memlane.agent.consolidation import sync_memory
from memlane.agent.facts import CHECK, restated
from memlane.agent.llm import LLM, AsyncLLM, ChatMessage
from memlane.agent.memory_tools import MEMORY_TYPES
from memlane.agent.messages import block_text
from memlane.agent.parsing import (
    CHARS_PER_TOKEN,
    MAX_ANSWER_CHARS,
    MAX_OPERATIONS,
    ParseError,
    extract_json,
)
from memlane.agent.statements import LEARNED, RESTATED, said_at, said_together
from memlane.errors import ConflictError, InvalidArgumentError, MemlaneError, UnknownIdError, shown
from memlane.scoping import exact_scope, scope_kwargs

if TYPE_CHECKING:
    from memlane.aio import AsyncMemory
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "Extraction",
    "ReflectionReport",
    "Resume",
    "areflect",
    "parse_operations",
    "reflect",
    "reflect_planned",
]

_FORMAT = (
    'Answer with one JSON object and nothing else: {"operations": [...]} where each '
    "operation is one of\n"
    '{"op": "remember", "content": str, "type": "semantic"|"episodic"|"procedural", '
    '"importance": 0..1}\n'
    '{"op": "update", "memory": <number of a listed memory>, "content": str}\n'
    '{"op": "forget", "memory": <number of a listed memory>}\n'
    "Refer to listed memories only by their number. Return an empty list if nothing changes."
)
_SYSTEM = (
    "You maintain an AI agent's long-term memory about a user. Given a conversation and the "
    "numbered memories already stored, decide what to change. Use update when a listed "
    "memory is outdated or wrong, never remember a second copy.\n" + _FORMAT
)


#: The scope's newest memories that may fill the places a search leaves empty.
_RECENT = 10
#: Why an operation on a memory rewritten since the model was shown it is not applied.
_CHANGED = "the memory changed meanwhile (the model judged a version it no longer has)"
_NEWER = "the memory was stated after the conversation shown: it stays"


@dataclass(slots=True)
class ReflectionReport:
    """What [`reflect`][memlane.reflect] did: records added, updated and forgotten (ids), and
    the operations rejected with the reason; ``error`` when the model failed or
    its answer had no operations list (then nothing changed)."""

    added: list[MemoryRecord] = field(default_factory=list)
    updated: list[MemoryRecord] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    rejected: list[tuple[Any, str]] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    error: str | None = None
    raw: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(slots=True, frozen=True)
class _Op:
    op: str
    content: str | None = None
    index: int | None = None
    type: str = "semantic"
    importance: float = 0.5
    category: str | None = None


def _content(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("'content' must be a non-empty string")
    return value.strip()


def _index(value: object, n: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("'memory' must be the number of a listed memory")
    if not 1 <= value <= n:
        raise ValueError(f"'memory' {value} is not a listed memory (1..{n})")
    return value - 1


def _one(item: object, n: int, categories: Sequence[str] = ()) -> _Op:
    if not isinstance(item, Mapping):
        raise ValueError("an operation must be an object")
    op = item.get("op", item.get("operation", item.get("action")))
    if not isinstance(op, str):
        raise ValueError("missing 'op'")
    op = op.strip().lower()
    if op in ("add", "create", "store"):
        op = "remember"
    elif op in ("delete", "remove"):
        op = "forget"
    elif op in ("edit", "replace"):
        op = "update"
    if op == "remember":
        kind = item.get("type") or "semantic"
        if kind not in MEMORY_TYPES:
            raise ValueError(f"'type' must be one of {list(MEMORY_TYPES)}")
        imp = item.get("importance", 0.5)
        # An int is finite however long; math.isfinite would overflow on a huge one.
        if (
            isinstance(imp, bool)
            or not isinstance(imp, int | float)
            or (isinstance(imp, float) and not math.isfinite(imp))
        ):
            raise ValueError("'importance' must be a number")
        category = item.get("category")
        if categories and category not in categories:
            raise ValueError(f"'category' must be one of {list(categories)}")
        return _Op(
            "remember",
            _content(item.get("content")),
            None,
            kind,
            min(max(imp, 0.0), 1.0),
            category if categories else None,
        )
    if op == "update":
        return _Op("update", _content(item.get("content")), _index(item.get("memory"), n))
    if op == "forget":
        return _Op("forget", None, _index(item.get("memory"), n))
    raise ValueError(f"unknown op {op!r}; expected remember, update or forget")


def parse_operations(
    text: object, n_shown: int, categories: Sequence[str] = ()
) -> tuple[list[_Op], list[tuple[Any, str]]]:
    """Valid operations and rejected ones (with why) from a model's answer.

    Accepts ``{"operations": [...]}`` or a bare list; with ``categories``, each
    ``remember`` must name one of them. Raises ``ParseError`` (with the answer as
    ``raw``) when the answer holds neither or is not text.
    """
    try:
        data: Any = extract_json(text)
        items = data.get("operations", data.get("ops"))
        if not isinstance(items, list):
            raise ParseError("'operations' must be a list")
    except ParseError:
        # A bare list, only as the answer's first JSON value: a list inside an object of
        # another shape (an operation's own "tags") is no list of operations.
        items = extract_json(text, object)
        if not isinstance(items, list):
            raise ParseError(
                'the answer holds neither {"operations": [...]} nor a list of operations',
                raw=text,
            ) from None
    ops: list[_Op] = []
    rejected: list[tuple[Any, str]] = []
    touched: set[int] = set()
    if len(items) > MAX_OPERATIONS:  # an answer (or a forged plan) cannot flood the store
        rejected += [
            (item, f"past the first {MAX_OPERATIONS} operations") for item in items[MAX_OPERATIONS:]
        ]
        items = items[:MAX_OPERATIONS]
    for item in items:
        try:
            op = _one(item, n_shown, categories)
            if op.index is not None:
                if op.index in touched:
                    raise ValueError(f"memory {op.index + 1} is already changed by an operation")
                touched.add(op.index)
        except ValueError as e:
            rejected.append((item, str(e)))
            continue
        ops.append(op)
    return ops, rejected


def _conversation(messages: Sequence[str | Mapping[str, Any]]) -> str:
    """The conversation as lines: each a str, or a message whose content is text
    (``block_text``); anything else is refused."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            f"conversation must be a list of lines or messages, got {shown(messages)}"
        )
    lines = []
    for i, m in enumerate(messages):
        if isinstance(m, str):
            lines.append(m)
            continue
        role = m.get("role", "user") if isinstance(m, Mapping) else None
        if not isinstance(role, str):
            raise InvalidArgumentError(
                f"conversation[{i}] must be a str or a message with a str role, got {shown(m)}"
            )
        try:
            lines.append(f"{role}: {block_text(m.get('content', ''))}")
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"conversation[{i}]: {e}") from None
    return "\n".join(lines)


@dataclass(slots=True, frozen=True)
class Extraction:
    """What reflection asks the model for: ``prompt`` replaces the instructions of what
    to remember (the answer's format is always added), ``categories`` the kinds of fact
    it may remember (each ``remember`` names one, kept as ``metadata["category"]``)."""

    prompt: str | None = None
    categories: tuple[str, ...] = ()

    def system(self) -> str:
        head = _SYSTEM if self.prompt is None else f"{self.prompt.strip()}\n\n{_FORMAT}"
        if not self.categories:
            return head
        listed = ", ".join(json.dumps(c) for c in self.categories)
        return f'{head}\nEach remember also has "category": one of {listed}.'


def _prepare(
    mem: Memory,
    text: str,
    kw: dict[str, Any],
    table: str,
    k: int,
    extraction: Extraction | None = None,
) -> tuple[list[MemoryRecord], list[ChatMessage]]:
    shown: list[MemoryRecord] = []
    # Exactly the scope, as the fact check reads it: a scope without an agent_id does
    # not show (nor so update or forget) the memories of the agents that have one.
    fields, only = exact_scope(mem, kw)
    if text.strip():
        query = text[-2000:]
        hits = mem.search(query, k, table=table, filters=only, track_access=False, **fields)
        shown = [h.record for h in hits]
    # Places the search left empty go to the scope's newest memories: in a store without
    # vectors a search finds nothing by meaning, and the model would be shown none. They
    # take no place from the search, whose hits are the likelier to be what the
    # conversation changes; what reflection remembers is checked against what the scope
    # knows anyway (agent/facts.py).
    if len(shown) < k:
        seen = {r.id for r in shown}
        # Current records only, as the search: a superseded fact is no longer true.
        current = mem.list(
            table, limit=_RECENT, filters={"$and": [only, {"valid_to": None}]}, **fields
        )
        newest = [r for r in current if r.id not in seen]
        shown += newest[: k - len(shown)]
    listed = "\n".join(f"{i}. {' '.join(r.text.split())}" for i, r in enumerate(shown, 1))
    messages: list[ChatMessage] = [
        {"role": "system", "content": (extraction or Extraction()).system()},
        {
            "role": "user",
            "content": f"Stored memories:\n{listed or '(none)'}\n\nConversation:\n{text}",
        },
    ]
    return shown, messages


def _apply(
    mem: Memory,
    report: ReflectionReport,
    shown: Sequence[MemoryRecord | None],
    kw: dict[str, Any],
    table: str,
    now: float | None,
    metadata: Mapping[str, Any] | None = None,
    resume: Resume | None = None,
    marks: Mapping[str, Any] | None = None,
    categories: Sequence[str] = (),
    versions: Sequence[float | None] | None = None,
    max_tokens: int | None = None,
) -> ReflectionReport:
    """Applies the model's answer (``report.raw``) to the memories ``shown`` it numbers;
    ``versions``: the ``updated_at`` of each as shown (None: unknown), when ``shown``
    holds them as they are now rather than as shown (a kept answer applied again);
    ``max_tokens``: the tokens the answer was asked in (None: not known)."""
    extra = dict(metadata or {})
    raw: object = report.raw
    if not isinstance(raw, str):  # a report keeps text; the error names anything else
        report.raw = None
    limit = MAX_ANSWER_CHARS if max_tokens is None else max_tokens * CHARS_PER_TOKEN
    if isinstance(raw, str) and len(raw) > limit:
        asked = "" if max_tokens is None else f" (asked in {max_tokens} tokens)"
        report.error = (
            f"ParseError: the answer has {len(raw)} characters, more than the {limit} an "
            f"answer may have{asked}: none of it applied"
        )
        return report
    clock = time.time() if now is None else now
    try:
        ops, report.rejected = parse_operations(raw, len(shown), categories)
    except ParseError as e:
        report.error = f"ParseError: {e}"
        return report
    if versions is None:  # the versions shown are the records themselves
        versions = [None if r is None else r.updated_at for r in shown]
    if resume is not None and resume.save is not None:
        try:  # the answer is kept before anything is stored: a crash resumes from it
            kept = {"raw": raw, "shown": list(report.shown), "versions": list(versions)}
            # The categories it was asked under: whoever resumes it may have others.
            resume.save({**kept, "categories": list(categories)})
        except MemlaneError as e:
            report.error = f"{type(e).__name__}: {e}"
            return report
    for i, op in enumerate(ops):
        if resume is not None and i in resume.done:
            continue
        tag = {**extra, resume.op_key: i} if resume is not None else extra
        old = None if op.index is None else shown[op.index]
        if old is not None and now is not None and said_at(old) > now:
            # Stated after the conversation the model was shown (a retried window's
            # reflection runs later): the newer statement stays.
            report.rejected.append((op.op, _NEWER))
            continue
        try:
            if op.op == "remember":
                assert op.content is not None
                rec = mem.add(
                    op.content,
                    table=table,
                    type=op.type,
                    importance=op.importance,
                    unique=True,
                    metadata={
                        "source": "reflection",
                        **({} if op.category is None else {"category": op.category}),
                        **tag,
                        **said_together(marks or {}, i),
                    },
                    created_at=clock,
                    **kw,
                )
                if rec.duplicate is None:
                    report.added.append(rec)
                else:
                    report.rejected.append((op.content, f"duplicate of {rec.duplicate_of}"))
                    if marks and rec.duplicate == "exact" and rec.duplicate_of is not None:
                        restated(mem, rec.duplicate_of, clock, said_together(marks, i))
            elif old is None:  # shown, and deleted since (by this job before a crash, or not)
                if op.op == "forget":
                    assert op.index is not None
                    report.forgotten.append(report.shown[op.index])
                else:
                    report.rejected.append((op.op, "the memory was deleted meanwhile"))
            elif op.op == "update":
                assert op.content is not None
                # Superseded, not overwritten: the old fact stays in the history and
                # answers searches as_of a time before the change.
                at = max(clock, old.created_at)
                # The successor is the reflection's statement, made now: it takes neither
                # the order the old one was learnt in (a fact stated before the reflection
                # would count as newer) nor when it was said again. It is checked as what
                # the reflection remembers is, and a fact that waited for its check still
                # waits for it.
                kept = {k: v for k, v in old.metadata.items() if k not in (LEARNED, RESTATED)}
                if kept.get(CHECK) != "pending":
                    kept.pop(CHECK, None)
                meta = {**kept, **tag, **said_together(marks or {}, i)}
                assert op.index is not None
                if versions[op.index] not in (None, old.updated_at):
                    report.rejected.append((op.op, _CHANGED))
                    continue
                # Given as the record read, the version shown (where it is known): one
                # rewritten since is refused inside the supersede's transaction.
                target = old.id if versions[op.index] is None else old
                report.updated.append(
                    mem.supersede(target, op.content, at=at, by="reflection", metadata=meta)
                )
            else:
                assert op.index is not None
                why = _forget(mem, old, versions[op.index], kw, table)
                if why is None:
                    report.forgotten.append(old.id)
                else:
                    report.rejected.append((op.op, why))
        except UnknownIdError:
            report.rejected.append((op.op, "the memory was deleted meanwhile"))
        except ConflictError:
            report.rejected.append((op.op, _CHANGED))
        except MemlaneError as e:
            report.rejected.append((op.op, f"{type(e).__name__}: {e}"))
    return report


def _forget(
    mem: Memory,
    rec: MemoryRecord,
    version: float | None,
    kw: Mapping[str, Any],
    table: str,
) -> str | None:
    """Deletes ``rec`` if it is still current and the version the model was shown
    (``version``: its ``updated_at`` then), checked inside the delete's transaction;
    None when it did, else why not."""
    if version is None:
        return "the version of the memory shown is not known: not forgotten"
    same = [{"id": rec.id}, {"updated_at": version}, {"valid_to": None}]
    if mem.delete_all(table, filters={"$and": same}, **kw):
        return None
    if rec.id not in mem:
        return "the memory was deleted meanwhile"
    return _CHANGED


def _get_in(mem: Memory) -> Callable[[str], MemoryRecord | None]:
    def get(record_id: str) -> MemoryRecord | None:
        try:
            return mem.get(record_id)
        except (UnknownIdError, InvalidArgumentError):
            return None

    return get


def _within(mem: Memory, rec: MemoryRecord, table: str, scope: Mapping[str, Any]) -> bool:
    """Whether ``rec`` is of ``table`` and of exactly ``scope`` (the store's
    ``default_scope`` under it), as a reflection shows the memories of its scope."""
    fields, only = exact_scope(mem, scope)
    expected = {**fields, **only}
    return rec.table == table and all(rec.scope.get(k) == v for k, v in expected.items())


@dataclass(slots=True, frozen=True)
class Resume:
    """How a reflection run as a durable job keeps its place: ``save`` keeps the model's
    answer (``{"raw", "shown"}``) before anything is stored; each memory stored names
    its operation under ``op_key``; ``done`` are the operations stored already."""

    op_key: str
    save: Callable[[dict[str, Any]], None] | None = None
    done: frozenset[int] = frozenset()


def reflect_planned(
    mem: Memory,
    plan: Mapping[str, Any],
    *,
    scope: Mapping[str, str] | None = None,
    table: str = "memories",
    now: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    resume: Resume,
    marks: Mapping[str, Any] | None = None,
    extraction: Extraction | None = None,
) -> ReflectionReport:
    """Applies a reflection's kept answer (``plan``: ``raw``, the ids ``shown``, the
    ``versions`` shown, each one's ``updated_at``, and the ``categories`` it was asked
    under) again, skipping ``resume.done``: how a
    job found after a crash finishes without the model. A ``forget`` of a memory changed
    since it was shown, or whose version the plan does not hold, is not applied."""
    ids = [str(i) for i in plan["shown"]]
    versions = _versions(plan.get("versions"), len(ids))
    kw = dict(scope or {})
    # A kept answer is data from whoever could write the job: it reaches only the
    # memories of its own table and scope.
    got = map(_get_in(mem), ids)
    shown = [r if r is not None and _within(mem, r, table, kw) else None for r in got]
    report = ReflectionReport(shown=ids, raw=str(plan["raw"]))
    # Those the model was asked under (an older plan holds none: the resumer's).
    asked = plan.get("categories")
    cats = asked if isinstance(asked, list) else () if extraction is None else extraction.categories
    return _apply(mem, report, shown, kw, table, now, metadata, resume, marks, cats, versions)


def _versions(value: object, n: int) -> list[float | None]:
    """A plan's versions shown, one per memory (None where a kept record, data from
    whoever could write it, holds none that a record could have)."""
    if not isinstance(value, list) or len(value) != n:
        return [None] * n
    return [v if isinstance(v, float) and math.isfinite(v) else None for v in value]


def reflect(
    mem: Memory,
    llm: LLM,
    conversation: Sequence[str | Mapping[str, Any]],
    *,
    scope: Mapping[str, str] | None = None,
    table: str = "memories",
    k: int = 10,
    now: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    resume: Resume | None = None,
    marks: Mapping[str, Any] | None = None,
    extraction: Extraction | None = None,
    max_tokens: int | None = None,
) -> ReflectionReport:
    """Lets the LLM update the memories of exactly ``scope`` (not those of a scope under
    it: an agent's, when ``scope`` has no ``agent_id``) after ``conversation``.

    ``conversation`` is a list of lines or of ``{role, content}`` messages. The
    ``k`` memories most relevant to it are shown. Never raises for the LLM:
    a failure is reported in ``error`` and nothing changes. ``now`` (default the
    wall clock) dates what it stores and when an updated fact stopped being true; given,
    a memory stated after it (``created_at``) is neither updated nor forgotten.
    ``metadata`` is added to the metadata of every memory it stores (the agent's
    upkeep names its job there), ``marks`` to the metadata of what it remembers (the
    check of new facts marks them); ``resume``: how a durable job keeps its place;
    ``extraction``: the prompt and categories of what it remembers; ``max_tokens``: the
    tokens ``llm`` asks the answer in, which bound the answer applied (an answer longer
    than ``CHARS_PER_TOKEN`` characters a token, or ``MAX_ANSWER_CHARS`` when not given,
    is refused whole: ``error``, nothing changes).
    """
    budget = None if max_tokens is None else coerce.count(max_tokens, "max_tokens", 1)
    kw = scope_kwargs(scope)
    shown, messages = _prepare(mem, _conversation(conversation), kw, table, k, extraction)
    report = ReflectionReport(shown=[r.id for r in shown])
    try:
        report.raw = llm.complete(messages)
    except Exception as e:  # the LLM's failure must not raise into the agent
        report.error = f"{type(e).__name__}: {e}"
        return report
    cats = () if extraction is None else extraction.categories
    return _apply(
        mem, report, shown, kw, table, now, metadata, resume, marks, cats, max_tokens=budget
    )


async def areflect(
    mem: Memory | AsyncMemory,
    llm: AsyncLLM,
    conversation: Sequence[str | Mapping[str, Any]],
    *,
    scope: Mapping[str, str] | None = None,
    table: str = "memories",
    k: int = 10,
    now: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    extraction: Extraction | None = None,
    max_tokens: int | None = None,
) -> ReflectionReport:
    """``reflect`` with an async LLM (``acomplete``); store calls run in a worker thread."""
    budget = None if max_tokens is None else coerce.count(max_tokens, "max_tokens", 1)
    sync = sync_memory(mem)
    kw = scope_kwargs(scope)
    text = _conversation(conversation)
    shown, messages = await asyncio.to_thread(_prepare, sync, text, kw, table, k, extraction)
    report = ReflectionReport(shown=[r.id for r in shown])
    try:
        report.raw = await llm.acomplete(messages)
    except Exception as e:  # the LLM's failure must not raise into the agent
        report.error = f"{type(e).__name__}: {e}"
        return report
    cats = () if extraction is None else extraction.categories
    return await asyncio.to_thread(
        _apply, sync, report, shown, kw, table, now, metadata, None, None, cats, None, budget
    )
