"""Memory tools for function-calling models: schemas (OpenAI and Anthropic) and one dispatcher.

>>> tools = MemoryTools(mem, scope={"user_id": "alice"})          # doctest: +SKIP
>>> client.chat.completions.create(..., tools=tools.openai())     # doctest: +SKIP
>>> tools.handle_tool_call("recall", '{"query": "coffee"}')       # doctest: +SKIP
{'ok': True, 'memories': [...]}

:meth:`MemoryTools.handle_tool_call` never raises into the agent loop: bad
arguments, unknown tools and store errors come back as
``{"ok": False, "error": {"type": ..., "message": ...}}``, which the model can
read and correct.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memlane.errors import InvalidArgumentError, MemlaneError, UnknownIdError

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["MEMORY_TYPES", "TOOL_SCHEMAS", "MemoryTools", "anthropic_tools", "openai_tools"]

#: The memory types the tools offer.
MEMORY_TYPES = ("semantic", "episodic", "procedural")

#: name -> (description, JSON schema of the arguments).
TOOL_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "remember": (
        "Store a fact, preference or event about the user or the conversation for later turns.",
        {
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1, "description": "What to remember."},
                "type": {
                    "type": "string",
                    "enum": list(MEMORY_TYPES),
                    "description": "semantic (facts), episodic (events), procedural (how-to).",
                },
                "importance": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "0 (trivial) to 1 (critical); default 0.5.",
                },
                "evergreen": {
                    "type": "boolean",
                    "description": "True for memories that must never fade (e.g. allergies).",
                },
                "metadata": {"type": "object", "description": "Optional extra fields."},
            },
            "required": ["content"],
            "additionalProperties": False,
        },
    ),
    "recall": (
        "Search stored memories relevant to a query, best first.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to look for."},
                "type": {"type": "string", "enum": list(MEMORY_TYPES)},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Max 50."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    "forget": (
        "Delete a stored memory by its id (as returned by recall or remember).",
        {
            "type": "object",
            "properties": {"id": {"type": "string", "minLength": 1}},
            "required": ["id"],
            "additionalProperties": False,
        },
    ),
    "search_knowledge": (
        "Search the ingested documents (knowledge base) for passages relevant to a query.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
}


def openai_tools() -> list[dict[str, Any]]:
    """The tools in OpenAI's chat-completions ``tools`` format."""
    return [
        {
            "type": "function",
            "function": {"name": name, "description": desc, "parameters": json_copy(schema)},
        }
        for name, (desc, schema) in TOOL_SCHEMAS.items()
    ]


def anthropic_tools() -> list[dict[str, Any]]:
    """The tools in Anthropic's Messages API ``tools`` format."""
    return [
        {"name": name, "description": desc, "input_schema": json_copy(schema)}
        for name, (desc, schema) in TOOL_SCHEMAS.items()
    ]


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (callers may mutate what they get)."""
    return json.loads(json.dumps(value))


class ToolArgumentError(ValueError):
    """Arguments that do not match a tool's schema."""


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
}


def validate_arguments(schema: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """Checks ``args`` against the subset of JSON Schema the tool schemas use."""
    props: Mapping[str, Any] = schema["properties"]
    unknown = sorted(set(args) - set(props))
    if unknown and not schema.get("additionalProperties", True):
        raise ToolArgumentError(f"unknown argument(s) {unknown}; expected {sorted(props)}")
    for key in schema.get("required", ()):
        if args.get(key) is None:
            raise ToolArgumentError(f"missing required argument {key!r}")
    out: dict[str, Any] = {}
    for key, value in args.items():
        if value is None:
            continue  # models send null for "not given"
        spec = props[key]
        kind = spec["type"]
        if isinstance(value, bool) and kind != "boolean":
            ok = False
        elif kind == "integer" and isinstance(value, float) and value.is_integer():
            value, ok = int(value), True
        else:
            ok = isinstance(value, _JSON_TYPES[kind])
        if not ok:
            raise ToolArgumentError(f"{key!r} must be a {kind}, got {type(value).__name__}")
        if kind == "number" and not math.isfinite(value):
            raise ToolArgumentError(f"{key!r} must be a finite number")
        if "enum" in spec and value not in spec["enum"]:
            raise ToolArgumentError(f"{key!r} must be one of {spec['enum']}, got {value!r}")
        if kind == "string" and len(value.strip()) < spec.get("minLength", 0):
            raise ToolArgumentError(f"{key!r} must not be empty")
        if kind == "string" and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ToolArgumentError(
                    f"{key!r} contains a lone surrogate at position {e.start}, "
                    "which is not valid Unicode"
                ) from None
        if "minimum" in spec and value < spec["minimum"]:
            raise ToolArgumentError(f"{key!r} must be >= {spec['minimum']}, got {value}")
        if "maximum" in spec and value > spec["maximum"]:
            raise ToolArgumentError(f"{key!r} must be <= {spec['maximum']}, got {value}")
        out[key] = value
    return out


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"type": kind, "message": message}}


def memory_view(rec: MemoryRecord, score: float | None = None) -> dict[str, Any]:
    """What a model sees of a memory."""
    out: dict[str, Any] = {
        "id": rec.id,
        "content": rec.text,
        "type": rec.type,
        "importance": rec.importance,
        "created_at": rec.created_at,
    }
    if rec.evergreen:
        out["evergreen"] = True
    if score is not None:
        out["score"] = round(score, 4)
    return out


class MemoryTools:
    """The memory tools bound to a store and a scope.

    Args:
        memory: the store.
        scope: scope fields every call uses (e.g. ``SessionScope.resolve(...).fields``);
            ``forget`` refuses ids outside it.
        table: where ``remember`` writes and ``recall`` searches.
        agent_id: whose private knowledge ``search_knowledge`` also reads
            (shared knowledge always); by default ``scope["agent_id"]``.
        unique: ``remember`` skips exact duplicates (and marks near ones).
        default_limit: ``recall`` and ``search_knowledge`` results when the model gives none.
    """

    def __init__(
        self,
        memory: Memory,
        scope: Mapping[str, str] | None = None,
        *,
        table: str = "memories",
        agent_id: str | None = None,
        unique: bool = True,
        default_limit: int = 5,
    ) -> None:
        self.memory = memory
        # Any: passed as **kwargs to calls whose other keywords have other types.
        self.scope: dict[str, Any] = dict(scope or {})
        self.table = table
        self.agent_id = agent_id if agent_id is not None else self.scope.get("agent_id")
        self.unique = unique
        self.default_limit = default_limit

    def openai(self) -> list[dict[str, Any]]:
        """The tool definitions in OpenAI's format."""
        return openai_tools()

    def anthropic(self) -> list[dict[str, Any]]:
        """The tool definitions in Anthropic's format."""
        return anthropic_tools()

    @property
    def names(self) -> list[str]:
        return list(TOOL_SCHEMAS)

    def handle_tool_call(
        self, name: str, arguments: Mapping[str, Any] | str | None
    ) -> dict[str, Any]:
        """Runs tool ``name`` with ``arguments`` (a dict or a JSON string); never raises.

        Returns ``{"ok": True, ...}`` or ``{"ok": False, "error": {"type", "message"}}``
        with ``type`` one of ``unknown_tool``, ``invalid_arguments``, ``not_found``,
        ``store_error``, ``internal_error``.
        """
        if name not in TOOL_SCHEMAS:
            return _error("unknown_tool", f"unknown tool {name!r}; tools are {list(TOOL_SCHEMAS)}")
        if arguments is None or arguments == "":
            arguments = {}
        if isinstance(arguments, str | bytes):
            try:
                arguments = json.loads(arguments)
            except ValueError as e:
                return _error("invalid_arguments", f"arguments are not valid JSON: {e}")
            except RecursionError:
                return _error("invalid_arguments", "arguments are nested too deeply")
        if not isinstance(arguments, Mapping):
            return _error(
                "invalid_arguments",
                f"arguments must be a JSON object, got {type(arguments).__name__}",
            )
        try:
            args = validate_arguments(TOOL_SCHEMAS[name][1], arguments)
        except ToolArgumentError as e:
            return _error("invalid_arguments", str(e))
        try:
            result: dict[str, Any] = getattr(self, f"_{name}")(**args)
        except UnknownIdError as e:
            return _error("not_found", str(e))
        except InvalidArgumentError as e:
            return _error("invalid_arguments", str(e))
        except MemlaneError as e:
            return _error("store_error", f"{type(e).__name__}: {e}")
        except Exception as e:  # never into the agent loop
            return _error("internal_error", f"{type(e).__name__}: {e}")
        return result

    # -- the tools -------------------------------------------------------------------------

    def _remember(
        self,
        content: str,
        type: str = "semantic",
        importance: float = 0.5,
        evergreen: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        rec = self.memory.add(
            content,
            table=self.table,
            type=type,
            importance=float(importance),
            evergreen=evergreen,
            metadata=metadata,
            unique=self.unique,
            **self.scope,
        )
        out: dict[str, Any] = {"ok": True, "id": rec.id, "stored": rec.duplicate is None}
        if rec.duplicate is not None:
            out["duplicate"] = rec.duplicate
            out["duplicate_of"] = rec.duplicate_of
        return out

    def _recall(
        self, query: str, type: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        hits = self.memory.search(
            query,
            limit or self.default_limit,
            table=self.table,
            type=type,
            track_access=True,
            **self.scope,
        )
        return {"ok": True, "memories": [memory_view(h.record, h.score) for h in hits]}

    def _forget(self, id: str) -> dict[str, Any]:
        rec = self.memory.get(id)
        if rec.table != self.table or any(rec.scope.get(f) != v for f, v in self.scope.items()):
            # Another user's or table's record: as if it did not exist.
            raise UnknownIdError(f"no memory with id {id!r}")
        self.memory.delete(id)
        return {"ok": True, "id": id, "forgotten": rec.text}

    def _search_knowledge(self, query: str, limit: int | None = None) -> dict[str, Any]:
        hits = self.memory.search_knowledge(
            query, agent_id=self.agent_id, k=limit or self.default_limit
        )
        return {
            "ok": True,
            "fragments": [
                {
                    "id": h.record.id,
                    "content": h.record.text,
                    "source": h.record.metadata.get("source"),
                    "score": round(h.score, 4),
                }
                for h in hits
            ],
        }

    def __repr__(self) -> str:
        return f"MemoryTools(scope={self.scope!r}, table={self.table!r})"
