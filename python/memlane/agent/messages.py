"""Chat messages as the agent loop reads and writes them: their text, the steps they
form, the assistant reply in its several shapes, and the memory block in the system prompt
(with the memory tools' instructions)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from memlane.errors import InvalidArgumentError, shown

_OPEN = "<memlane-memory"
BLOCK_CLOSE = "</memlane-memory>"
# The block as ``inject`` writes it, from its opening tag to the last closing tag: the
# text inside is ``neutral``, so it holds no tag of its own, and a prompt a memlane
# without ``neutral`` left with a stored tag inside its block loses the whole block.
_BLOCK = re.compile(r'\n*<memlane-memory turn="[^"<>]*">.*</memlane-memory>', re.DOTALL)
_TURN = re.compile(r'<memlane-memory turn="([^"]*)">')
# A "<" that opens a tag of the block, in any case and spacing a reader may take for one.
_TAG = re.compile(r"<(?=\s*/?\s*memlane-memory)", re.IGNORECASE)
SUMMARY_TAG = "[memlane: summary of earlier steps]"


#: The memory tools' usage instructions, in the memory block when tools are on.
TOOL_INSTRUCTIONS = (
    "## Memory tools\n"
    "You have a long-term memory that outlasts this conversation.\n"
    "- `recall`: search it before answering anything about the user, their preferences "
    "or earlier conversations.\n"
    "- `remember`: store one durable fact, preference or event per call (importance 0 to 1; "
    "evergreen for what must never fade, such as allergies).\n"
    "- `forget`: delete a memory by the id recall or remember gave, when it is wrong or "
    "the user asks.\n"
    "- `search_knowledge`: search the ingested documents.\n"
    "What you remember above was found for this message; recall finds more."
)
NOTES_TOOL_INSTRUCTIONS = (
    "- `notes_append` / `notes_replace`: write your long-term notes (journal, learning, "
    "user, world, memory; shown above) when you learn something worth keeping across "
    "conversations."
)
CORE_TOOL_INSTRUCTIONS = (
    "- `core_memory_append` / `core_memory_replace`: edit your core memory blocks (shown "
    "above with their size and limit) when something lasting about you or the user changes."
)


#: The types of a content block whose ``text`` is its text: Chat Completions' and
#: Anthropic's ``text``, and the Responses API's ``input_text`` and ``output_text``.
TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})


def block_text(content: Any) -> str:
    """The text of a message's content: a str, or the text parts of a list of blocks (a
    number is written out; a block of another kind, an image or a tool call, has none).
    Any other value is refused: what its ``str`` gives is anybody's guess (bytes, a list
    inside the list), and for a list nested thousands deep it overflows the stack."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping):
                if block.get("type") in TEXT_BLOCKS:
                    text = block.get("text", "")
                    if not isinstance(text, str):
                        raise InvalidArgumentError(
                            f"a text block's text must be a str, got {shown(text)}"
                        )
                    parts.append(text)
            elif isinstance(block, int | float) and not isinstance(block, bool):
                parts.append(shown(block))
            else:
                raise InvalidArgumentError(
                    f"a content block must be a str or a dict, got {shown(block)}"
                )
        return "\n".join(p for p in parts if p)
    if isinstance(content, int | float) and not isinstance(content, bool):
        return shown(content)
    raise InvalidArgumentError(
        f"a message's content must be a str or a list of blocks, got {shown(content)}"
    )


def _holds_block(text: object) -> bool:
    return isinstance(text, str) and _OPEN in text


def _has_tool_result(content: Any) -> bool:
    return (
        isinstance(content, Sequence)
        and not isinstance(content, str)
        and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
    )


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The user's message of this turn: the last text a user wrote in ``messages`` (its
    text blocks, beside tool results too), or None. The user messages before it are
    taken as the history a caller passes whole, each stored by the turn that was its
    own: ``after`` is called once a message the platform delivers. None, too, where a
    summary of compacted steps comes after it: the turn's message is in the summary,
    and the text before it is an older turn's."""
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        text = block_text(m.get("content"))
        if text.startswith(SUMMARY_TAG):
            return None
        if text.strip():
            return text
    return None


def reply_message(reply: Any) -> dict[str, Any]:
    """An assistant message from a str, a message dict, a raw completion or an SDK object."""
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    if not isinstance(reply, Mapping) and callable(getattr(reply, "model_dump", None)):
        reply = reply.model_dump()
    if isinstance(reply, Mapping):
        choices = reply.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message")
            if isinstance(message, Mapping):
                return dict(message)
        if "content" in reply or "tool_calls" in reply:
            return {"role": "assistant", **dict(reply)}
    raise InvalidArgumentError(
        "reply must be a str, an assistant message dict, a chat completion or an SDK "
        f"message object, got {type(reply).__name__}"
    )


def check_messages(messages: object) -> list[dict[str, Any]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidArgumentError("messages must be a list of {role, content} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidArgumentError(f"messages[{i}] must be a dict with a str 'role'")
        try:
            block_text(m.get("content"))
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"messages[{i}]: {e}") from None
        out.append(dict(m))
    return out


def group_steps(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Messages grouped into steps: each with the tool results that answer it."""
    steps: list[list[dict[str, Any]]] = []
    for m in messages:
        joins = m.get("role") == "tool" or (
            m.get("role") == "user" and _has_tool_result(m.get("content"))
        )
        if joins and steps:
            steps[-1].append(m)
        else:
            steps.append([m])
    return steps


def render_step(step: Sequence[Mapping[str, Any]], limit: int = 2000) -> str:
    lines = []
    for m in step:
        role = m.get("role", "?")
        text = block_text(m.get("content"))
        content = m.get("content")
        if isinstance(content, Sequence) and not isinstance(content, str):
            for b in content:
                if isinstance(b, Mapping) and b.get("type") == "tool_use":
                    text += f"\ncalled {b.get('name')}({json.dumps(b.get('input'))})"
                elif isinstance(b, Mapping) and b.get("type") == "tool_result":
                    text += f"\nresult: {block_text(b.get('content'))}"
        for call in m.get("tool_calls") or ():
            if isinstance(call, Mapping):
                fn = call.get("function") or {}
                text += f"\ncalled {fn.get('name')}({fn.get('arguments')})"
        text = " ".join(text.split())
        if len(text) > limit:  # a prompt, not a stored entry
            text = text[: limit - 1] + "…"
        lines.append(f"{role}: {text}")
    return "\n".join(lines)


def neutral(text: str) -> str:
    """``text`` as the memory block shows it: the ``<`` of anything that reads as the
    block's opening or closing tag (``<memlane-memory``, ``</memlane-memory>``, in any
    case) written as ``&lt;``, so stored text (a message quoting the tag) can neither end
    the block early nor start one. Idempotent; ``&lt;`` reads back as ``<``."""
    return _TAG.sub("&lt;", text)


def check_system(system: Any) -> None:
    """Refuses a system prompt that is neither a str nor a list of blocks whose text
    parts are str (None: there is none)."""
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, Sequence) or isinstance(system, bytes | bytearray):
        raise InvalidArgumentError(
            f"the system prompt must be a str or a list of blocks, got {shown(system)}"
        )
    block_text(system)


def with_block(system: Any, block: str | None) -> Any:
    """The system prompt (a str or a list of text blocks) with our block replaced."""
    if isinstance(system, Sequence) and not isinstance(system, str):
        kept = [b for b in system if not (isinstance(b, Mapping) and _holds_block(b.get("text")))]
        return kept + ([{"type": "text", "text": block}] if block else [])
    base = _BLOCK.sub("", system or "").rstrip()
    if not block:
        return base
    return f"{base}\n\n{block}" if base else block


def block_turn(system: Any) -> str | None:
    m = _TURN.search(block_text(system) if not isinstance(system, str) else system)
    return m.group(1) if m else None
