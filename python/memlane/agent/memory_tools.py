"""Memory tools for function-calling models: schemas (OpenAI and Anthropic) and one dispatcher.

>>> tools = MemoryTools(mem, scope={"user_id": "alice"})          # doctest: +SKIP
>>> client.chat.completions.create(..., tools=tools.openai())     # doctest: +SKIP
>>> tools.handle_tool_call("recall", '{"query": "coffee"}')       # doctest: +SKIP
{'ok': True, 'memories': [...]}

With ``core=`` (a ``CoreMemory``) the model also edits its core
memory blocks (``core_memory_append``, ``core_memory_replace``); with ``notes=`` (a
``Notebook``) it writes its long-term notes, OrcBot's
``JOURNAL.md``, ``LEARNING.md``, ``USER.md``, ``WORLD.md`` and ``MEMORY.md``
(``notes_append``, ``notes_replace``), each file within its limit.

``MemoryTools.handle_tool_call`` never raises into the agent loop: bad
arguments, unknown tools and store errors come back as
``{"ok": False, "error": {"type": ..., "message": ...}}``, which the model can
read and correct.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memlane import json_depth
from memlane.agent.core_memory import CORE_TOOL_SCHEMAS, CoreMemory, CoreMemoryLimitError
from memlane.errors import InvalidArgumentError, MemlaneError, UnknownIdError, shown
from memlane.notes import NOTE_FILES, Notebook, NoteEdit, NoteLimitError
from memlane.scoping import agents_apart, scope_of

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "MEMORY_TYPES",
    "NOTES_TOOL_SCHEMAS",
    "TOOL_SCHEMAS",
    "MemoryTools",
    "anthropic_tools",
    "openai_tools",
]

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


_FILE = {
    "type": "string",
    "enum": list(NOTE_FILES),
    "description": "JOURNAL.md: what you did; LEARNING.md: what you learned; USER.md: about "
    "the user; WORLD.md: about the world around you; MEMORY.md: lasting facts.",
}

#: name -> (description, JSON schema of the arguments): the long-term notes tools.
NOTES_TOOL_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "notes_append": (
        "Add a dated entry to one of your long-term notes files (shown to you under "
        "'Long-term notes' in every conversation). Each file has a character limit.",
        {
            "type": "object",
            "properties": {
                "file": _FILE,
                "content": {"type": "string", "minLength": 1, "description": "The entry."},
            },
            "required": ["file", "content"],
            "additionalProperties": False,
        },
    ),
    "notes_replace": (
        "Rewrite text in one of your long-term notes files: every occurrence of old_content "
        "becomes new_content (an empty new_content deletes it; an entry left empty is "
        "removed). Use it to correct notes or to make room in a full file.",
        {
            "type": "object",
            "properties": {
                "file": _FILE,
                "old_content": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Exact text of an entry, without its [date].",
                },
                "new_content": {"type": "string"},
            },
            "required": ["file", "old_content", "new_content"],
            "additionalProperties": False,
        },
    ),
}


def _schemas(core: bool, notes: bool = False) -> dict[str, tuple[str, dict[str, Any]]]:
    out = {**TOOL_SCHEMAS, **CORE_TOOL_SCHEMAS} if core else dict(TOOL_SCHEMAS)
    return {**out, **NOTES_TOOL_SCHEMAS} if notes else out


def openai_tools(core: bool = False, notes: bool = False) -> list[dict[str, Any]]:
    """The tools in OpenAI's chat-completions ``tools`` format (``core``: with the core
    memory tools, see ``memlane.agent.core_memory``; ``notes``: with the long-term
    notes tools, see ``memlane.notes``)."""
    return [
        {
            "type": "function",
            "function": {"name": name, "description": desc, "parameters": json_copy(schema)},
        }
        for name, (desc, schema) in _schemas(core, notes).items()
    ]


def anthropic_tools(core: bool = False, notes: bool = False) -> list[dict[str, Any]]:
    """The tools in Anthropic's Messages API ``tools`` format (``core`` and ``notes`` as
    in ``openai_tools``)."""
    return [
        {"name": name, "description": desc, "input_schema": json_copy(schema)}
        for name, (desc, schema) in _schemas(core, notes).items()
    ]


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (callers may mutate what they get)."""
    return json.loads(json.dumps(value))


class ToolArgumentError(ValueError):
    """Arguments that do not match a tool's schema."""


# The checks are jsonschema's (Draft 2020-12), so what a model is shown and what is
# enforced are the same schema; a keyword added to a schema is checked with no code here.
# Only what JSON Schema cannot say is checked after it: a null argument means "not
# given" (models send them), numbers must be finite (Python's json reads NaN), strings
# must be valid Unicode (JSON escapes can encode a lone surrogate) and not blank where a
# minLength asks for text, an integral float is an integer. Its errors are rendered as
# short messages naming the argument, not with the offending value's repr (which can be
# megabytes).
_validators: dict[int, Any] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    v = _validators.get(id(schema))
    if v is None:
        from jsonschema import Draft202012Validator  # ~0.2 s to import: on first use only

        if len(_validators) > 64:  # schemas other than the tools' own, made per call
            _validators.clear()
        v = _validators[id(schema)] = (schema, Draft202012Validator(schema))
    return v[1]


# Which error to report when there are several: the call's shape first, then arguments in order.
_FIRST = {"additionalProperties": 0, "required": 1, "type": 2}


def _message(error: Any, schema: Mapping[str, Any], args: Mapping[str, Any]) -> str:
    keyword, value, instance = error.validator, error.validator_value, error.instance
    if keyword == "additionalProperties":
        unknown = sorted(set(args) - set(schema["properties"]))  # all str: checked first
        return f"unknown argument(s) {unknown}; expected {sorted(schema['properties'])}"
    if keyword == "required":
        missing = [k for k in value if k not in args]
        return f"missing required argument {missing[0]!r}"
    key = ".".join(str(p) for p in error.absolute_path) or "arguments"
    if keyword == "type":
        article = "an" if str(value)[:1] in ("a", "e", "i", "o", "u") else "a"
        return f"{key!r} must be {article} {value}, got {type(instance).__name__}"
    if keyword == "enum":
        return f"{key!r} must be one of {value}, got {repr(instance)[:80]}"
    if keyword == "minLength":
        return f"{key!r} must not be empty"
    if keyword == "minimum":
        return f"{key!r} must be >= {value}, got {shown(instance)}"
    if keyword == "maximum":
        return f"{key!r} must be <= {value}, got {shown(instance)}"
    return f"{key!r}: {error.message[:200]}"


def validate_arguments(schema: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """Checks ``args`` against a tool's JSON schema; returns them without nulls."""
    # JSON's names are str; a dict given directly can have others, which no schema
    # names and which do not sort among str in the error message.
    odd = [k for k in args if not isinstance(k, str)]
    if odd:
        raise ToolArgumentError(f"argument names must be str, got {type(odd[0]).__name__}")
    given = {k: v for k, v in args.items() if v is not None}
    # JSON has no complex, Decimal or Fraction; the schema's bounds would compare them
    # and raise (TypeError, or InvalidOperation for a Decimal NaN).
    for key, value in given.items():
        if isinstance(value, numbers.Number) and not isinstance(value, int | float):
            raise ToolArgumentError(f"{key!r} must be a JSON number, got {type(value).__name__}")
        # The schema's checks write an int in their messages, and Python refuses to write
        # one of more than 4,300 digits (a ValueError from inside the validator).
        if isinstance(value, int) and value.bit_length() > 64:
            raise ToolArgumentError(
                f"{key!r} must be a number of 64 bits at most, got {shown(value)}"
            )
    errors = sorted(
        _validator(schema).iter_errors(given),
        key=lambda e: (_FIRST.get(e.validator, 3), [str(p) for p in e.absolute_path]),
    )
    if errors:
        raise ToolArgumentError(_message(errors[0], schema, given))
    props: Mapping[str, Any] = schema["properties"]
    out: dict[str, Any] = {}
    for key, value in given.items():
        kind = props[key].get("type")
        if kind == "integer" and isinstance(value, float):
            value = int(value)  # JSON Schema's integers include 3.0
        elif kind == "number" and not math.isfinite(value):
            raise ToolArgumentError(f"{key!r} must be a finite number")
        elif kind == "string" and len(value.strip()) < props[key].get("minLength", 0):
            raise ToolArgumentError(f"{key!r} must not be empty")
        elif kind == "string" and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ToolArgumentError(
                    f"{key!r} contains a lone surrogate at position {e.start}, "
                    "which is not valid Unicode"
                ) from None
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
        scope: scope fields every call uses (e.g. ``SessionScope.resolve(...).fields``),
            over the store's ``default_scope``; ``forget`` refuses ids outside the two.
            A scope without ``agent_id`` (or ``namespace``) is no agent's: ``recall``
            and ``forget`` leave out the records of the agents that have one.
        table: where ``remember`` writes and ``recall`` searches.
        agent_id: whose private knowledge ``search_knowledge`` also reads
            (shared knowledge always); by default ``scope["agent_id"]``.
        unique: ``remember`` skips exact duplicates (and marks near ones).
        default_limit: ``recall`` and ``search_knowledge`` results when the model gives none.
        core: core memory blocks the model edits with ``core_memory_append`` and
            ``core_memory_replace`` (offered only when given).
        notes: long-term notes the model writes with ``notes_append`` and
            ``notes_replace`` (offered only when given).
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
        core: CoreMemory | None = None,
        notes: Notebook | None = None,
    ) -> None:
        if core is not None and not isinstance(core, CoreMemory):
            raise InvalidArgumentError(f"core must be a CoreMemory, got {shown(core)}")
        if notes is not None and not isinstance(notes, Notebook):
            raise InvalidArgumentError(f"notes must be a Notebook, got {shown(notes)}")
        self.memory = memory
        # Any: passed as **kwargs to calls whose other keywords have other types.
        self.scope: dict[str, Any] = dict(scope or {})
        self.table = table
        self.agent_id = agent_id if agent_id is not None else self.scope.get("agent_id")
        self.unique = unique
        self.default_limit = default_limit
        self.core = core
        self.notes = notes

    def openai(self) -> list[dict[str, Any]]:
        """The tool definitions in OpenAI's format."""
        return openai_tools(self.core is not None, self.notes is not None)

    def anthropic(self) -> list[dict[str, Any]]:
        """The tool definitions in Anthropic's format."""
        return anthropic_tools(self.core is not None, self.notes is not None)

    def schemas(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """name -> (description, JSON schema of the arguments) of the tools offered."""
        return _schemas(self.core is not None, self.notes is not None)

    @property
    def names(self) -> list[str]:
        return list(self.schemas())

    def handle_tool_call(
        self, name: str, arguments: Mapping[str, Any] | str | None
    ) -> dict[str, Any]:
        """Runs tool ``name`` with ``arguments`` (a dict or a JSON string); never raises.

        Returns ``{"ok": True, ...}`` or ``{"ok": False, "error": {"type", "message"}}``
        with ``type`` one of ``unknown_tool``, ``invalid_arguments``, ``not_found``,
        ``limit_exceeded`` (a core memory or notes edit past a block's or file's limit:
        the result also has ``limit``, ``size`` and ``over``), ``store_error``,
        ``internal_error``.
        """
        schemas = self.schemas()
        if not isinstance(name, str):
            return _error("unknown_tool", f"the tool name must be a str, got {type(name).__name__}")
        if name not in schemas:
            return _error("unknown_tool", f"unknown tool {shown(name)}; tools are {list(schemas)}")
        if arguments is None or (isinstance(arguments, str) and not arguments):
            arguments = {}
        if isinstance(arguments, str | bytes):
            try:
                arguments = json_depth.loads(arguments)
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
            args = validate_arguments(schemas[name][1], arguments)
            result: dict[str, Any] = getattr(self, f"_{name}")(**args)
        except ToolArgumentError as e:
            return _error("invalid_arguments", str(e))
        except UnknownIdError as e:
            return _error("not_found", str(e))
        except (CoreMemoryLimitError, NoteLimitError) as e:
            return {
                **_error("limit_exceeded", str(e)),
                "limit": e.limit,
                "size": e.size,
                "over": e.over,
            }
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
        created_at: float | None = None,
    ) -> dict[str, Any]:
        rec = self.memory.add(
            content,
            table=self.table,
            type=type,
            importance=float(importance),
            evergreen=evergreen,
            metadata=metadata,
            unique=self.unique,
            created_at=created_at,
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
            filters=agents_apart(self.memory, self.scope),
            **self.scope,
        )
        return {"ok": True, "memories": [memory_view(h.record, h.score) for h in hits]}

    def _forget(self, id: str) -> dict[str, Any]:
        rec = self.memory.get(id)
        # The scope as recall searches it: the store's default_scope under the tools',
        # without the records of agents the tools' scope does not name.
        scope = scope_of(self.memory.default_scope, self.scope)
        apart = agents_apart(self.memory, self.scope) or {}
        if (
            rec.table != self.table
            or any(rec.scope.get(f) != v for f, v in scope.items())
            or any(rec.scope.get(f) is not None for f in apart)
        ):
            # Another agent's, user's or table's record: as if it did not exist.
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

    def _core_memory_append(self, label: str, content: str) -> dict[str, Any]:
        assert self.core is not None  # offered only with core memory
        block = self.core.append(label, content)
        return {"ok": True, "label": label, "chars": len(block.value), "limit": block.limit}

    def _core_memory_replace(
        self, label: str, old_content: str, new_content: str
    ) -> dict[str, Any]:
        assert self.core is not None
        block = self.core.replace(label, old_content, new_content)
        return {"ok": True, "label": label, "chars": len(block.value), "limit": block.limit}

    def _notes_append(self, file: str, content: str) -> dict[str, Any]:
        assert self.notes is not None  # offered only with notes
        return _note_result(self.notes.append(file, content))

    def _notes_replace(self, file: str, old_content: str, new_content: str) -> dict[str, Any]:
        assert self.notes is not None
        edit = self.notes.replace(file, old_content, new_content)
        return {**_note_result(edit), "replaced": edit.replaced, "removed": edit.removed}

    def __repr__(self) -> str:
        return f"MemoryTools(scope={self.scope!r}, table={self.table!r})"


def _note_result(edit: NoteEdit) -> dict[str, Any]:
    return {"ok": True, "file": edit.file, "chars": edit.size, "limit": edit.limit}
