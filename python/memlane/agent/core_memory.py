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
user's) blocks are exactly those of its scope. Unlike retrieved memories,
blocks are not searched for: :class:`~memlane.agent.AgentMemory` puts all of
them in every system prompt (``core_memory=``), and the model edits them with
the ``core_memory_append`` and ``core_memory_replace`` tools.

An edit that would take a block past its limit is refused with
:class:`CoreMemoryLimitError`, which says the limit, the block's size and how
far over the edit would go, so the model can shorten or replace content.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlane.agent.checks import _int
from memlane.errors import InvalidArgumentError, UnknownIdError
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
]

#: The table blocks live in.
CORE = "core"
#: Characters a block holds by default: Letta's original default. Blocks are in
#: every prompt, so their size is paid at every model call: at about four
#: characters a token, ``persona`` and ``human`` full to 2,000 characters each
#: take half of :class:`~memlane.agent.AgentMemory`'s default 2,000-token budget,
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


def _label(label: object) -> str:
    if not isinstance(label, str) or _LABEL.fullmatch(label) is None:
        raise InvalidArgumentError(
            "a core memory label is a letter or _ then letters, digits or _ "
            f"(at most 64), got {label!r}"
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
    """

    def __init__(
        self, memory: Memory, scope: Mapping[str, str] | None = None, *, table: str = CORE
    ) -> None:
        self.memory = memory
        self.scope, self._only = exact_scope(memory, scope or {})
        self.table = table

    @staticmethod
    def check(label: object, limit: object) -> None:
        """Raises :class:`~memlane.errors.InvalidArgumentError` unless ``label`` is a block
        label (a letter or _, then up to 63 letters, digits or _) and ``limit`` an int >= 1."""
        _label(label)
        _int(limit, "limit", 1)

    def _id(self, label: str) -> str:
        key = json.dumps([self.table, sorted(self.scope.items()), label])
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
        )

    def _record(self, label: str) -> MemoryRecord | None:
        rid = self._id(label)
        return self.memory.get(rid) if rid in self.memory else None

    # -- reading ------------------------------------------------------------------------------

    def get(self, label: str) -> Block:
        """The block ``label``; raises :class:`~memlane.errors.UnknownIdError` if undefined."""
        rec = self._record(_label(label))
        if rec is None:
            raise UnknownIdError(
                f"no core memory block {label!r}; blocks are {self.labels() or 'none'}"
            )
        return self._block(rec)

    def blocks(self) -> list[Block]:
        """Every block of the scope, in the order they were defined."""
        recs = self.memory.list(
            self.table, limit=1000, order="asc", type=_TYPE, filters=self._only, **self.scope
        )
        return [self._block(r) for r in recs]

    def labels(self) -> list[str]:
        """The labels of :meth:`blocks`."""
        return [b.label for b in self.blocks()]

    def render(self) -> str:
        """The blocks as the model sees them: each with its size and limit, so the model
        knows how much room is left."""
        parts = ["## Core memory (always shown; edit with core_memory_append / _replace)"]
        for b in self.blocks():
            about = f' description="{b.description}"' if b.description else ""
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
        limit: int = DEFAULT_BLOCK_LIMIT,
        description: str | None = None,
    ) -> Block:
        """Creates block ``label`` holding ``value``, or, if it exists, sets its limit (and
        its description, when given) and keeps its value (so defining the blocks at every
        start is safe).

        Raises :class:`CoreMemoryLimitError` if the value (new or kept) is over ``limit``.
        """
        self.check(label, limit)
        _text(value, "value")
        if description is not None:
            _text(description, "description")
        rec = self._record(label)
        block = None if rec is None else self._block(rec)
        current = value if block is None else block.value
        if len(current) > limit:
            raise CoreMemoryLimitError(label, limit, len(current), len(current))
        if description is None:
            description = "" if block is None else block.description
        meta = {"label": label, "limit": limit, "description": description}
        if rec is None:
            rec = self.memory.add(
                f"{label}: {value}",
                table=self.table,
                type=_TYPE,
                metadata=meta,
                evergreen=True,
                id=self._id(label),
                **self.scope,
            )
        elif rec.metadata != meta:
            rec = self.memory.update(rec.id, metadata=meta)
        return self._block(rec)

    def set(self, label: str, value: str) -> Block:
        """Replaces the value of block ``label`` (within its limit)."""
        block = self.get(label)
        return self._write(block, _text(value, "value"))

    def append(self, label: str, content: str) -> Block:
        """Adds ``content`` to block ``label``, on a new line (within its limit)."""
        block = self.get(label)
        content = _text(content, "content")
        if not content.strip():
            raise InvalidArgumentError("content must not be empty")
        return self._write(block, f"{block.value}\n{content}" if block.value else content)

    def replace(self, label: str, old_content: str, new_content: str) -> Block:
        """Replaces every occurrence of ``old_content`` in block ``label`` with
        ``new_content`` (as Letta's ``core_memory_replace``); raises
        :class:`~memlane.errors.UnknownIdError` if ``old_content`` is not in it."""
        block = self.get(label)
        old = _text(old_content, "old_content")
        new = _text(new_content, "new_content")
        if not old:
            raise InvalidArgumentError("old_content must not be empty")
        if old not in block.value:
            raise UnknownIdError(
                f"old_content {old[:80]!r} is not in core memory block {label!r}; "
                "it must match the block's text exactly"
            )
        return self._write(block, block.value.replace(old, new))

    def delete(self, label: str) -> None:
        """Removes block ``label``."""
        self.memory.delete(self.get(label).id)

    def _write(self, block: Block, value: str) -> Block:
        if len(value) > block.limit:
            raise CoreMemoryLimitError(block.label, block.limit, len(block.value), len(value))
        if value == block.value:
            return block
        return self._block(self.memory.update(block.id, text=f"{block.label}: {value}"))

    def __repr__(self) -> str:
        return f"CoreMemory(scope={self.scope!r}, table={self.table!r})"
