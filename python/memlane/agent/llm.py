"""The ``LLM`` protocol and ``OpenAIChat``, a client for any chat-completions API.

Consolidation and reflection take any object with ``complete(messages) -> str``
(and, for their async variants, ``acomplete``). ``OpenAIChat`` speaks the
OpenAI chat-completions protocol (OpenAI, vLLM, Ollama, LM Studio, llama.cpp
server, ...) over httpx, sync and async: a request that fails on the network
or with 408, 409, 429 or 5xx is retried ``max_retries`` times with
exponential backoff (honouring ``Retry-After``; see ``memlane.openai_http``);
anything else (a reply past the timeout or too large, a body that is not the
protocol's) raises ``LLMError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from memlane.errors import InvalidArgumentError, MemlaneError, shown
from memlane.openai_http import OpenAIHTTPClient, json_body

__all__ = ["LLM", "AsyncLLM", "ChatMessage", "LLMError", "OpenAIChat"]

ChatMessage = Mapping[str, str]

_PATH = "chat/completions"


class LLMError(MemlaneError, RuntimeError):
    """The language model could not be reached or gave no usable answer."""


@runtime_checkable
class LLM(Protocol):
    """A chat model: messages (``{"role": ..., "content": ...}``) in, text out."""

    def complete(self, messages: Sequence[ChatMessage]) -> str: ...


@runtime_checkable
class AsyncLLM(Protocol):
    """The async form of [`LLM`][memlane.LLM]."""

    async def acomplete(self, messages: Sequence[ChatMessage]) -> str: ...


def _check_messages(messages: Sequence[Mapping[str, Any]], text: bool) -> list[dict[str, Any]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise InvalidArgumentError("messages must be a non-empty list of {role, content} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidArgumentError(f"messages[{i}] must be a dict with a str 'role'")
        # Tool-calling turns may carry tool_calls and no text.
        if text and not isinstance(m.get("content"), str):
            raise InvalidArgumentError(f"messages[{i}]['content'] must be a str")
        out.append(dict(m))
    return out


class OpenAIChat(OpenAIHTTPClient):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the model name sent with each request.
        base_url: the API root; requests go to ``{base_url}/chat/completions``.
        api_key: a bearer token; defaults to ``$OPENAI_API_KEY`` (none if unset).
        temperature: the sampling temperature (a finite number), sent when not None.
        max_tokens: the reply's token limit (an int >= 1), sent when not None.
        timeout: seconds each try of a request may take, from connecting to the reply's
            last byte (a retry has as many again). A reply may take
            ``memlane.openai_http.MAX_ANSWER`` bytes (32 MiB) at most.
        max_retries: retries of a failed request.
        backoff: seconds before the first retry, doubled at each (or the response's
            ``Retry-After``).
        headers: more headers for each request (printable ASCII).
        extra: more fields for the request body (e.g. ``{"response_format": ...}``); they,
            like the messages, ``tools`` and options of each call, must be JSON (no NaN,
            no lone surrogate), else ``InvalidArgumentError``.

    [`close`][memlane.OpenAIChat.close] / [`aclose`][memlane.OpenAIChat.aclose] (or
    ``with`` / ``async with``) release the connections.
    """

    _error = LLMError

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            headers=headers,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
        )
        if temperature is not None and not (
            isinstance(temperature, int | float)
            and not isinstance(temperature, bool)
            and math.isfinite(temperature)
        ):
            raise InvalidArgumentError(
                f"temperature must be a finite number or None, got {shown(temperature)}"
            )
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise InvalidArgumentError(
                f"max_tokens must be an int >= 1 or None, got {shown(max_tokens)}"
            )
        if extra is not None and not isinstance(extra, Mapping):
            raise InvalidArgumentError(f"extra must be a dict, got {type(extra).__name__}")
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra = dict(extra or {})
        json_body(self.extra, "extra")  # refused now rather than at every call

    @property
    def url(self) -> str:
        return f"{self.base_url}/{_PATH}"

    def _payload(
        self, messages: Sequence[Mapping[str, Any]], text: bool, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": _check_messages(messages, text)}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        body.update(self.extra)
        body.update({k: v for k, v in options.items() if v is not None})
        return body

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        """The model's reply to ``messages``; raises [`LLMError`][memlane.agent.LLMError]
        when there is none."""
        return self._text(self._post_json(_PATH, self._payload(messages, True, {})))

    async def acomplete(self, messages: Sequence[ChatMessage]) -> str:
        """The async form of [`complete`][memlane.OpenAIChat.complete]."""
        return self._text(await self._apost_json(_PATH, self._payload(messages, True, {})))

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """The assistant message itself (``content`` and any ``tool_calls``), for tool use.

        ``tools`` takes OpenAI-format definitions (e.g. ``MemoryTools.openai()``);
        ``options`` go into the request body (``tool_choice``, ...).
        """
        body = self._payload(messages, False, {"tools": tools, **options})
        return self._message(self._post_json(_PATH, body))

    async def achat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """The async form of [`chat`][memlane.OpenAIChat.chat]."""
        body = self._payload(messages, False, {"tools": tools, **options})
        return self._message(await self._apost_json(_PATH, body))

    def _message(self, body: Any) -> dict[str, Any]:
        try:
            message = body["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as e:
            raise LLMError(f"{self.url} returned an unexpected body: {e!r}") from None
        if not isinstance(message, dict):
            raise LLMError(f"{self.url} returned an unexpected body: message is not an object")
        return message

    def _text(self, body: Any) -> str:
        content = self._message(body).get("content")
        if not isinstance(content, str):
            raise LLMError(f"{self.url} returned no text content (got {type(content).__name__})")
        return content

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"
