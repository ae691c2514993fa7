"""Pinned core memory, as Letta's memory blocks: named, size-limited text always in context.

>>> core = CoreMemory(mem, {"agent_id": "helper", "user_id": "alice"})   # doctest: +SKIP
>>> core.define("human", "Name: Alice.")                                  # doctest: +SKIP
>>> core.append("human", "Vegan.")                                        # doctest: +SKIP
>>> print(core.render())                                                  # doctest: +SKIP

A block is a record in the ``core`` table (type ``core_block``, text
``"<label>: <value>"``, metadata ``label``, ``limit`` and ``description``), so
blocks persist, follow JSONL export and import and live in PostgreSQL like
any record. Its id is derived from its scope and label, so one scope has one
block per label and another scope's blocks are never read: an agent's (or a
user's) blocks are exactly those of its scope. That id can be computed by anyone:
a record held under it that is not a core block of the scope with that label
(another scope's, added there first) is never taken for the block, which is then
defined under the next of its spare ids (``<id>-1`` to ``<id>-8``, in order, so that
agents defining it at once still make one block; ``derived_ids``) and found by its
scope and label. Unlike retrieved memories,
blocks are not searched for: ``AgentMemory`` puts all of
them in every system prompt (``core_memory=``), and the model edits them with
the ``core_memory_append`` and ``core_memory_replace`` tools.

An edit that would take a block past its limit is refused with
``CoreMemoryLimitError``, which says the limit, the block's size and how
far over the edit would go, so the model can shorten or replace content.

A block can be shared by several agents, as Letta's shared blocks: declared
``shared={"human": ("user_id",)}`` (or ``AgentMemory(core_memory={"human":
Shared(2000, by=("user_id",))})``), block ``human`` is kept in the scope made of
the ``user_id`` alone (and the ``namespace``, when the scope has one: tenants
never share), so every agent of that user reads and edits one block, and sees
another's edit at its next read. An edit supersedes the block's record (the
old value stays in ``history``, with the editing agent as
``by``); the store refuses to supersede a version that is no longer current,
so when two agents edit at once the later edit is applied again to what the
first left, and neither is lost.

>>> human = Shared(2000, by=("user_id",))                                       # doctest: +SKIP
>>> a = CoreMemory(mem, {"agent_id": "a", "user_id": "alice"}, shared={"human": human})
>>> b = CoreMemory(mem, {"agent_id": "b", "user_id": "alice"}, shared={"human": human})
>>> a.define("human", limit=human); a.append("human", "Vegan.")             # doctest: +SKIP
>>> b.get("human").value                                                    # doctest: +SKIP
'Vegan.'
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlane import coerce, edits
from memlane.agent.holder import finite
from memlane.derived_ids import add_derived, find_derived
from memlane.errors import InvalidArgumentError, UnknownIdError, shown
from memlane.records import SCOPE_FIELDS
from memlane.scoping import exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "CORE",
    "CORE_TOOL_SCHEMAS",
    "DEFAULT_BLOCK_LIMIT",
    "Block",
    "CoreMemory",
    "CoreMemoryLimitError",
    "Shared",
]

#: The table blocks live in.
CORE = "core"
#: Characters a block holds by default: Letta's original default. Blocks are in
#: every prompt, so their size is paid at every model call: at about four
#: characters a token, ``persona`` and ``human`` full to 2,000 characters each
#: take half of ``AgentMemory``'s default 2,000-token budget,
#: and leave the other half to history, knowledge and retrieved memories.
DEFAULT_BLOCK_LIMIT = 2000
#: The blocks ``AgentMemory(core_memory=True)`` defines (as Letta's agents).
DEFAULT_BLOCKS = {"persona": DEFAULT_BLOCK_LIMIT, "human": DEFAULT_BLOCK_LIMIT}
_TYPE = "core_block"
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

#: name -> (description, JSON schema of the arguments): the core memory tools.
CORE_TOOL_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "core_memory_append": (
        "Append text to one of your core memory blocks (always shown to you), e.g. a "
        "lasting fact about the user in 'human'. Each block has a character limit.",
        {
            "type": "object",
            "properties": {
                "label": {"type": "string", "minLength": 1, "description": "The block."},
                "content": {"type": "string", "minLength": 1, "description": "Text to add."},
            },
            "required": ["label", "content"],
            "additionalProperties": False,
        },
    ),
    "core_memory_replace": (
        "Replace text in one of your core memory blocks: every occurrence of old_content "
        "becomes new_content (an empty new_content deletes it).",
        {
            "type": "object",
            "properties": {
                "label": {"type": "string", "minLength": 1},
                "old_content": {"type": "string", "minLength": 1, "description": "Exact text."},
                "new_content": {"type": "string"},
            },
            "required": ["label", "old_content", "new_content"],
            "additionalProperties": False,
        },
    ),
}


def block_limits(core_memory: object) -> dict[str, int | Shared]:
    """The blocks AgentMemory's ``core_memory=`` asks for: True for
    ``DEFAULT_BLOCKS``, False for none, or a non-empty ``{label: limit}`` dict."""
    if isinstance(core_memory, bool):
        return dict(DEFAULT_BLOCKS) if core_memory else {}
    if isinstance(core_memory, Mapping) and core_memory:
        blocks = dict(core_memory)
        for label, limit in blocks.items():
            CoreMemory.check(label, limit)
        return blocks
    raise InvalidArgumentError(
        f"core_memory must be a bool or a non-empty {{label: limit}} dict, got {shown(core_memory)}"
    )


class CoreMemoryLimitError(InvalidArgumentError):
    """An edit would take a core memory block past its character limit."""

    def __init__(self, label: str, limit: int, size: int, new_size: int) -> None:
        self.label, self.limit, self.size, self.new_size = label, limit, size, new_size
        super().__init__(
            f"core memory block {label!r} is limited to {limit} characters: it holds {size}, "
            f"and the edit would make it {new_size}, {self.over} over; shorten what you add "
            "or replace existing content"
        )

    @property
    def over(self) -> int:
        """Characters past the limit."""
        return self.new_size - self.limit


def _a_limit(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _a_label(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _moment(value: object, otherwise: float) -> float:
    return float(value) if finite(value) else otherwise


@dataclass(frozen=True, slots=True)
class Block:
    """One core memory block: its ``label``, ``value`` (the text), character ``limit``
    and ``description`` (what it is for, shown to the model)."""

    label: str
    value: str
    limit: int
    description: str = ""
    id: str = ""
    updated_at: float = 0.0
    #: The scope fields a shared block is kept by (empty: the block is the scope's own).
    shared: tuple[str, ...] = ()


def _fields(by: object) -> tuple[str, ...]:
    fields = (by,) if isinstance(by, str) else by
    if (
        not isinstance(fields, Sequence)
        or not fields
        or any(f not in SCOPE_FIELDS for f in fields)
        or len(set(fields)) != len(fields)
    ):
        raise InvalidArgumentError(
            f"a shared block is kept by one or more distinct scope fields of {list(SCOPE_FIELDS)}, "
            f"got {shown(by)}"
        )
    return tuple(fields)


@dataclass(frozen=True, slots=True, init=False)
class Shared:
    """A core memory block's limit that also shares the block: kept in the scope made of
    the ``by`` fields of each agent's scope (and its ``namespace``, when it has one), so
    every agent whose scope has the same values sees and edits one block.

    ``AgentMemory(core_memory={"persona": 2000, "human": Shared(2000, by=("user_id",))})``:
    each agent its own ``persona``, one ``human`` per user for all agents. Agents sharing
    a block should give it the same limit (each sets it when it defines the block).
    """

    limit: int
    by: tuple[str, ...]

    def __init__(self, limit: int = DEFAULT_BLOCK_LIMIT, *, by: Sequence[str] = ("user_id",)):
        coerce.count(limit, "limit", 1)
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "by", _fields(by))


def _label(label: object) -> str:
    if not isinstance(label, str) or _LABEL.fullmatch(label) is None:
        raise InvalidArgumentError(
            "a core memory label is a letter or _ then letters, digits or _ "
            f"(at most 64), got {shown(label)}"
        )
    return label


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
    return value


class CoreMemory:
    """The core memory blocks of one scope.

    Args:
        memory: the store.
        scope: the scope fields the blocks belong to (e.g. ``{"agent_id": "helper"}``,
            or an event's ``fields`` for an agent's blocks per user).
        table: where blocks live.
        shared: ``{label: fields}`` (or ``{label: Shared(...)}``): the blocks kept not in
            ``scope`` but in the part of it these fields (and its ``namespace``) make up,
            so every CoreMemory whose scope has the same values sees and edits the same
            block, e.g. ``{"human": ("user_id",)}`` for one ``human`` block per user.
    """

    def __init__(
        self,
        memory: Memory,
        scope: Mapping[str, str] | None = None,
        *,
        table: str = CORE,
        shared: Mapping[str, Sequence[str] | Shared] | None = None,
    ) -> None:
        self.memory = memory
        self.scope, self._only = exact_scope(memory, scope or {})
        self.table = coerce.text(table, "table")
        self._shared: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self.shared: dict[str, tuple[str, ...]] = {}
        if shared is not None and not isinstance(shared, Mapping):
            raise InvalidArgumentError(
                f"shared must be a {{label: fields}} dict, got {shown(shared)}"
            )
        for label, by in (shared or {}).items():
            self._share(_label(label), by.by if isinstance(by, Shared) else _fields(by))

    def _share(self, label: str, by: tuple[str, ...]) -> None:
        if self.shared.get(label, by) != by:
            raise InvalidArgumentError(
                f"core memory block {label!r} is shared by {list(self.shared[label])}, "
                f"not {list(by)}"
            )
        missing = [f for f in by if self.scope.get(f) is None]
        if missing:
            raise InvalidArgumentError(
                f"core memory block {label!r} is shared by {list(by)}, but the scope "
                f"{self.scope} has no {missing}: it would be shared by everyone"
            )
        keyed = {f: self.scope[f] for f in by}
        if self.scope.get("namespace") is not None:  # tenants never share
            keyed.setdefault("namespace", self.scope["namespace"])
        self._shared[label] = exact_scope(self.memory, keyed)
        self.shared[label] = by

    @staticmethod
    def check(label: object, limit: object) -> None:
        """Raises [`InvalidArgumentError`][memlane.errors.InvalidArgumentError] unless
        ``label`` is a block label (a letter or _, then up to 63 letters, digits or _) and
        ``limit`` an int >= 1 (or a [`Shared`][memlane.agent.Shared])."""
        _label(label)
        if not isinstance(limit, Shared):
            coerce.count(limit, "limit", 1)

    def _where(self, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The scope block ``label`` lives in, and the filter matching it exactly."""
        return self._shared.get(label, (self.scope, self._only))

    def _id(self, label: str) -> str:
        scope = self._where(label)[0]
        key = json.dumps([self.table, sorted(scope.items()), label])
        return "core-" + hashlib.sha256(key.encode()).hexdigest()[:32]

    def _block(self, rec: MemoryRecord) -> Block:
        label = str(rec.metadata["label"])
        return Block(
            label,
            rec.text[len(label) + 2 :],
            int(rec.metadata["limit"]),
            str(rec.metadata.get("description", "")),
            rec.id,
            rec.updated_at,
            self.shared.get(label, ()),
        )

    def _mine(self, rec: MemoryRecord | None, label: str) -> MemoryRecord | None:
        """``rec`` if it is block ``label`` of this scope, else None. A block's id can be
        computed by anyone, so a record of another scope may be held under it, and a
        version that superseded a block is what its writer made it: only a core block of
        this table, label and exact scope is this scope's."""
        if (
            rec is None
            or rec.table != self.table
            or rec.type != _TYPE
            or rec.metadata.get("label") != label
            or rec.scope != self._where(label)[0]
            or not _a_limit(rec.metadata.get("limit"))  # a writer's own, not a block
        ):
            return None
        return rec

    def _record(self, label: str) -> MemoryRecord | None:
        """The current version of block ``label`` (an edit supersedes the block)."""
        scope, only = self._where(label)
        flt = {"$and": [only, {"label": label}, {"valid_to": None}]}
        for rec in self.memory.list(
            self.table, limit=4, order="asc", type=_TYPE, filters=flt, **scope
        ):
            latest = self._mine(edits.latest(self.memory, rec), label)
            if latest is not None:
                return latest
        # The index may not show yet what another process just wrote: the database decides.
        return find_derived(self.memory, self._id(label), lambda rec: self._latest(rec, label))

    def _latest(self, rec: MemoryRecord, label: str) -> MemoryRecord | None:
        """The current version of ``rec`` if ``rec`` is a version of block ``label``."""
        if self._mine(rec, label) is None:
            return None
        return self._mine(edits.latest(self.memory, rec), label)

    # -- reading ------------------------------------------------------------------------------

    def get(self, label: str) -> Block:
        """The block ``label``; raises [`UnknownIdError`][memlane.errors.UnknownIdError]
        if undefined."""
        rec = self._record(_label(label))
        if rec is None:
            raise UnknownIdError(
                f"no core memory block {label!r}; blocks are {self.labels() or 'none'}"
            )
        return self._block(rec)

    def blocks(self) -> list[Block]:
        """Every block of the scope (its shared ones included), in the order they were
        defined."""
        recs = [
            r
            for r in self.memory.list(
                self.table,
                limit=1000,
                order="asc",
                type=_TYPE,
                filters={"$and": [self._only, {"valid_to": None}]},
                **self.scope,
            )
            if r.metadata.get("label") not in self._shared
            and _a_label(r.metadata.get("label"))
            and _a_limit(r.metadata.get("limit"))  # else a writer's own, not a block
        ]
        recs += [r for label in self._shared if (r := self._record(label)) is not None]
        recs.sort(key=lambda r: _moment(r.metadata.get("defined_at"), r.created_at))
        return [self._block(r) for r in recs]

    def labels(self) -> list[str]:
        """The labels of [`blocks`][memlane.CoreMemory.blocks]."""
        return [b.label for b in self.blocks()]

    def render(self) -> str:
        """The blocks as the model sees them: each with its size and limit, so the model
        knows how much room is left (and a shared one with what it is shared by)."""
        parts = ["## Core memory (always shown; edit with core_memory_append / _replace)"]
        for b in self.blocks():
            about = f' description="{b.description}"' if b.description else ""
            if b.shared:
                about += f' shared_by="{",".join(b.shared)}"'
            parts.append(
                f'<{b.label} chars="{len(b.value)}/{b.limit}"{about}>\n{b.value}\n</{b.label}>'
            )
        return "\n".join(parts) if len(parts) > 1 else ""

    # -- writing ------------------------------------------------------------------------------

    def define(
        self,
        label: str,
        value: str = "",
        *,
        limit: int | Shared = DEFAULT_BLOCK_LIMIT,
        description: str | None = None,
    ) -> Block:
        """Creates block ``label`` holding ``value``, or, if it exists, sets its limit (and
        its description, when given) and keeps its value (so defining the blocks at every
        start is safe). A [`Shared`][memlane.agent.Shared] limit also declares the block
        shared, as ``shared=`` does. A kept value over the limit (lowered since, or set
        by another agent sharing the block with a larger one) stays: until it is within
        it, an edit may shorten the block but not lengthen it.

        Raises [`CoreMemoryLimitError`][memlane.agent.CoreMemoryLimitError] if a new
        block's value is over ``limit``, and
        [`InvalidArgumentError`][memlane.errors.InvalidArgumentError] if a new block's ids
        are all held by records that are not it (see the module docs).
        """
        self.check(label, limit)
        if isinstance(limit, Shared):
            self._share(label, limit.by)
            limit = limit.limit
        _text(value, "value")
        if description is not None:
            _text(description, "description")
        rec = self._record(label)
        if rec is None:
            if len(value) > limit:
                raise CoreMemoryLimitError(label, limit, len(value), len(value))
            scope = self._where(label)[0]
            meta = {
                "label": label,
                "limit": limit,
                "description": description or "",
                "defined_at": time.time(),
            }

            def add(rid: str) -> MemoryRecord:
                block: dict[str, Any] = {"table": self.table, "type": _TYPE, "evergreen": True}
                return self.memory.add(f"{label}: {value}", metadata=meta, **block, id=rid, **scope)

            rec, new = add_derived(
                self.memory,
                self._id(label),
                add,
                lambda found: self._latest(found, label),
                f"core memory block {label!r}",
            )
            if new:
                return self._block(rec)
            # else another agent defined it first: theirs is kept, with this limit

        def change(rec: MemoryRecord) -> tuple[str, dict[str, Any] | None] | None:
            block = self._block(rec)
            about = block.description if description is None else description
            meta = {**rec.metadata, "limit": limit, "description": about}
            return None if meta == rec.metadata else (rec.text, meta)

        return self._block(self._rewrite(rec, change))

    def set(self, label: str, value: str) -> Block:
        """Replaces the value of block ``label`` (within its limit)."""
        value = _text(value, "value")
        return self._edit(label, lambda block: value)

    def append(self, label: str, content: str) -> Block:
        """Adds ``content`` to block ``label``, on a new line (within its limit)."""
        content = _text(content, "content")
        if not content.strip():
            raise InvalidArgumentError("content must not be empty")
        return self._edit(label, lambda b: f"{b.value}\n{content}" if b.value else content)

    def replace(self, label: str, old_content: str, new_content: str) -> Block:
        """Replaces every occurrence of ``old_content`` in block ``label`` with
        ``new_content`` (as Letta's ``core_memory_replace``); raises
        [`UnknownIdError`][memlane.errors.UnknownIdError] if ``old_content`` is not in it."""
        old = _text(old_content, "old_content")
        new = _text(new_content, "new_content")
        if not old:
            raise InvalidArgumentError("old_content must not be empty")

        def replaced(block: Block) -> str:
            if old not in block.value:
                raise UnknownIdError(
                    f"old_content {old[:80]!r} is not in core memory block {label!r}; "
                    "it must match the block's text exactly"
                )
            return block.value.replace(old, new)

        return self._edit(label, replaced)

    def delete(self, label: str) -> None:
        """Removes block ``label`` (with the versions its edits left). The versions are
        found in the transaction that deletes them, after every other writer's commit: an
        edit either lands before and goes with them, or finds the block gone."""
        self.get(label)
        scope, only = self._where(label)
        flt = {"$and": [only, {"label": label}]}
        self.memory.replace([], self.table, type=_TYPE, filters=flt, **scope)

    def _edit(self, label: str, value_of: Callable[[Block], str]) -> Block:
        """Block ``label`` with ``value_of(block)`` as its value. The edit supersedes the
        block's record; if another agent edited the block meanwhile, ``value_of`` is
        applied again to what it left, so neither edit is lost."""
        rec = self._record(_label(label))
        if rec is None:
            self.get(label)  # raises, naming the blocks there are

        def change(rec: MemoryRecord) -> tuple[str, dict[str, Any] | None] | None:
            block = self._block(rec)
            value = value_of(block)
            # A block over its limit (lowered since it was filled) may shrink toward it.
            if len(value) > block.limit and len(value) > len(block.value):
                raise CoreMemoryLimitError(label, block.limit, len(block.value), len(value))
            return None if value == block.value else (f"{label}: {value}", None)

        assert rec is not None
        return self._block(self._rewrite(rec, change))

    def _rewrite(
        self,
        rec: MemoryRecord,
        change: Callable[[MemoryRecord], tuple[str, dict[str, Any] | None] | None],
    ) -> MemoryRecord:
        label = str(rec.metadata.get("label"))
        return edits.rewrite(
            self.memory,
            rec,
            change,
            by=self.scope.get("agent_id"),
            gone=f"core memory block {label!r} was deleted during the edit",
            find=lambda: self._record(label),
            slot=label,  # a block's edits take turns; another block's need not wait
        )

    def __repr__(self) -> str:
        shared = f", shared={self.shared!r}" if self.shared else ""
        return f"CoreMemory(scope={self.scope!r}, table={self.table!r}{shared})"
