"""The stdio transport of ``memlane mcp``: one JSON-RPC message a line, each read and
checked here before the MCP SDK sees it, so that every request gets exactly one reply.

The SDK's own stdio transport drops, without a reply, every line it cannot turn into a
message: malformed JSON, a lone surrogate (``"\\ud800"``: valid JSON, but no Unicode
text), ``params`` that is not an object, an id that is neither a string nor an integer,
a batch; and it reads bytes that are not UTF-8 as U+FFFD. Here such a line gets the
JSON-RPC error it calls for, with the request's id when it has a valid one (else null):

- ``-32700`` (parse error): not UTF-8, not JSON (``NaN`` included), a number of more
  digits than Python reads, nesting deeper than ``json_depth.MAX_DEPTH`` (500 levels);
- ``-32600`` (invalid request): not an object (a batch: MCP has none), no
  ``"jsonrpc": "2.0"``, a bad id or method, ``params`` that is not an object, neither a
  request, a notification nor a response;
- ``-32602`` (invalid params): arrays and objects nested deeper than ``MAX_DEPTH``
  levels anywhere in the message (itself the first level), a response's too; a lone
  surrogate in ``params``, except in a tool's ``arguments``, which reach the tool: its
  error result names the argument.

Messages that pass go to the SDK; its replies pass here too, and one that cannot be
written as JSON becomes a ``-32603`` error reply to its request. The SDK's stdio
transport still writes them, keeping stray output of the process off stdout.

At the end of stdin the server answers every request it has read, waiting for the
handlers still running (a request the client cancelled excepted: it gets no reply),
and then stops.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from memlane import json_depth

__all__ = ["MAX_DEPTH", "check_line", "stdio_transport", "writable"]

#: Levels of arrays and objects a message may nest (a tool's arguments need a few more
#: than the 16 levels of metadata a record may hold).
MAX_DEPTH = 64

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
_INT64 = 2**63
# Python reads integers of up to this many digits (sys.get_int_max_str_digits()).
_MAX_DIGITS = 4300


def _error(rid: object, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"a number has more than {_MAX_DIGITS:,} digits")
    return int(digits)


def _not_text(value: str) -> int | None:
    """Where ``value`` holds a lone surrogate, None if it holds none."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def _flaw(value: object, path: str, level: int, *, text: bool = True) -> str | None:
    """What in ``value``, at ``level`` of its message (the message itself is level 1),
    nests deeper than ``MAX_DEPTH`` or (with ``text``) is no Unicode text, named by its
    path; None if nothing is."""
    stack: list[tuple[object, str, int]] = [(value, path, level)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, dict | list) and depth > MAX_DEPTH:
            return f"{where} nests deeper than {MAX_DEPTH} levels"
        if isinstance(item, str) and text:
            at = _not_text(item)
            if at is not None:
                return (
                    f"{where} holds a lone surrogate ({item[at]!r}) at position {at}, "
                    "which is not Unicode text"
                )
        elif isinstance(item, dict):
            for key, child in item.items():
                at = _not_text(key) if text else None
                if at is not None:
                    return f"a key in {where} holds a lone surrogate ({key[at]!r})"
                stack.append((child, f"{where}.{key}" if where else key, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
    return None


def _id(message: dict[str, Any]) -> tuple[object, str | None]:
    """The message's id (None if absent) and what is wrong with it, if anything."""
    if "id" not in message:
        return None, None
    rid = message["id"]
    if isinstance(rid, str):
        at = _not_text(rid)
        if at is None:
            return rid, None
        return None, f"id holds a lone surrogate ({rid[at]!r}), which is not Unicode text"
    if isinstance(rid, int) and not isinstance(rid, bool) and -_INT64 <= rid < _INT64:
        return rid, None
    if isinstance(rid, int) and not isinstance(rid, bool):
        return None, "id must be an integer of at most 64 bits (or a string)"
    return None, f"id must be a string or an integer, got {_kind(rid)}"


def _kind(value: object) -> str:
    """What a JSON value is, in JSON's words (the value itself may be huge, or no text)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def check_line(line: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What to do with one line read from stdin: ``(message, None)`` to hand a message
    to the SDK, ``(None, reply)`` to answer it with an error instead, ``(None, None)``
    for a blank line (nothing sent, nothing to answer)."""
    raw = line.rstrip(b"\r\n")
    if not raw.strip():
        return None, None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, _error(None, PARSE_ERROR, f"Parse error: byte {e.start} is not UTF-8")
    try:
        message = json_depth.loads(text, parse_constant=_no_constant, parse_int=_integer)
    except json.JSONDecodeError as e:
        return None, _error(None, PARSE_ERROR, f"Parse error: {e.msg} at column {e.colno}")
    except ValueError as e:  # NaN, Infinity, or too many digits
        return None, _error(None, PARSE_ERROR, f"Parse error: {e}")
    except RecursionError:
        return None, _error(
            None,
            PARSE_ERROR,
            f"Parse error: the line nests deeper than {json_depth.MAX_DEPTH} levels",
        )
    if isinstance(message, list):
        return None, _error(
            None,
            INVALID_REQUEST,
            "Invalid Request: batches are not part of MCP; send one message per line",
        )
    if not isinstance(message, dict):
        return None, _error(
            None, INVALID_REQUEST, f"Invalid Request: a message is an object, got {_kind(message)}"
        )
    rid, bad_id = _id(message)
    if bad_id is not None:
        return None, _error(None, INVALID_REQUEST, f"Invalid Request: {bad_id}")
    if message.get("jsonrpc") != "2.0":
        return None, _error(rid, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" not in message:
        answers = ("result" in message) != ("error" in message)
        if "id" not in message or not answers:  # not a reply to a request of the server's
            return None, _error(rid, INVALID_REQUEST, "Invalid Request: no method")
        params = None
    else:
        method = message["method"]
        if not isinstance(method, str) or not method or _not_text(method) is not None:
            return None, _error(
                rid, INVALID_REQUEST, "Invalid Request: method must be a non-empty Unicode string"
            )
        params = message.get("params")
        if "params" in message and not isinstance(params, dict):
            return None, _error(
                rid,
                INVALID_REQUEST,
                f"Invalid Request: params must be an object, got {_kind(params)}",
            )
    flaw = None
    if params is not None:
        outer = dict(params)
        # A tool's arguments reach the tool, which names the one that is no text.
        arguments = outer.pop("arguments", None) if message["method"] == "tools/call" else None
        flaw = _flaw(outer, "params", 2) or _flaw(arguments, "params.arguments", 3, text=False)
    if flaw is None:
        # The depth limit holds for every member, replies' included: the SDK's models
        # parse them all, not params alone.
        rest = {key: value for key, value in message.items() if params is None or key != "params"}
        flaw = _flaw(rest, "", 1, text=False)
    if flaw is not None:
        return None, _error(rid, INVALID_PARAMS, f"Invalid params: {flaw}")
    return message, None


def writable(item: Any) -> Any:
    """``item`` (an SDK ``SessionMessage``), or the error reply to its request that stands
    for it when it cannot be written as JSON: the SDK's writer would fail on it, and the
    server with it."""
    try:
        item.message.model_dump_json(by_alias=True, exclude_unset=True)
    except ValueError:
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        reply = _error(
            getattr(item.message, "id", None),
            INTERNAL_ERROR,
            "Internal error: the reply holds text that is not Unicode (a lone surrogate), "
            "so it was not sent",
        )
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(reply))
    return item


class _Ours:
    """An error reply of this module's, to a line the SDK never saw: it answers no
    request the SDK is handling."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item


class _Unanswered:
    """The requests handed to the SDK that it has not answered yet, counted by id as the
    SDK correlates them (``"7"`` and ``7`` are one id)."""

    def __init__(self) -> None:
        import anyio
        import mcp_types as types
        from mcp.shared.dispatcher import coerce_request_id
        from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params

        self._anyio = anyio
        self._types = types
        self._key = coerce_request_id
        self._cancelled = cancelled_request_id_from_params
        self.count: Counter[object] = Counter()
        self.changed = anyio.Event()

    def _settle(self, key: object, *, every: bool = False) -> None:
        left = 0 if every else self.count[key] - 1
        if left > 0:
            self.count[key] = left
        else:
            del self.count[key]
        self.changed.set()

    def read(self, message: Any) -> None:
        """Counts a request the SDK is handed. A cancelled one is settled: the SDK never
        answers a request its client cancelled."""
        types = self._types
        if isinstance(message, types.JSONRPCRequest):
            self.count[self._key(message.id)] += 1
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
        ):
            rid = self._cancelled(message.params)
            if rid is not None and self._key(rid) in self.count:
                self._settle(self._key(rid), every=True)

    def written(self, message: Any) -> None:
        """Settles the request a reply of the SDK's answers."""
        replies = (self._types.JSONRPCResponse, self._types.JSONRPCError)
        rid = message.id if isinstance(message, replies) else None
        if rid is not None and self._key(rid) in self.count:
            self._settle(self._key(rid))

    async def all_answered(self) -> None:
        while self.count:
            self.changed = self._anyio.Event()
            await self.changed.wait()


@contextlib.asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` for the SDK's ``Server.run`` over stdin and stdout:
    lines are read here (see ``check_line``), replies written by the SDK's stdio
    transport. At the end of stdin the stream to the SDK ends only once the SDK has
    answered every request read: when it ends, the SDK ends the session and drops the
    replies of the handlers still running."""
    import anyio
    import mcp_types as types
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from pydantic import ValidationError

    done = anyio.Event()
    unanswered = _Unanswered()

    class _Nothing:
        """The SDK transport's stdin: no line, until the server is done."""

        def __aiter__(self) -> _Nothing:
            return self

        async def __anext__(self) -> str:
            await done.wait()
            raise StopAsyncIteration

    to_server, from_client = anyio.create_memory_object_stream[Any](0)
    replies, outgoing = anyio.create_memory_object_stream[Any](0)

    def as_message(data: dict[str, Any]) -> Any:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data, by_name=False))

    async def read(answer: Any) -> None:
        stdin = anyio.wrap_file(sys.stdin.buffer)
        async with to_server, answer:
            async for line in stdin:
                message, reply = check_line(line)
                if reply is None and message is not None:
                    try:
                        parsed = as_message(message)
                    except ValidationError as e:  # the SDK's models refuse it
                        first = e.errors()[0]
                        where = ".".join(map(str, first["loc"]))
                        reply = _error(
                            message.get("id"),
                            INVALID_REQUEST,
                            f"Invalid Request: {where}: {first['msg']}",
                        )
                    else:
                        unanswered.read(parsed.message)
                        await to_server.send(parsed)
                        continue
                if reply is not None:
                    await answer.send(_Ours(as_message(reply)))
            # With no time limit: a client that cannot wait closes the process (MCP's
            # stdio shutdown), and a reply cut short would be a tool's effect unreported.
            await unanswered.all_answered()

    async def write(sdk: Any) -> None:
        async with sdk, outgoing:
            async for item in outgoing:
                if isinstance(item, _Ours):
                    await sdk.send(writable(item.item))
                    continue
                await sdk.send(writable(item))
                unanswered.written(item.message)

    async with stdio_server(stdin=_Nothing()) as (_, sdk_write):  # type: ignore[arg-type]
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read, replies.clone())
                tg.start_soon(write, sdk_write)
                yield from_client, replies
        finally:
            done.set()
