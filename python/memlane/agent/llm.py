"""The :class:`LLM` protocol and :class:`OpenAIChat`, a client for any chat-completions API.

Consolidation and reflection take any object with ``complete(messages) -> str``
(and, for their async variants, ``acomplete``). :class:`OpenAIChat` speaks the
OpenAI chat-completions protocol (OpenAI, vLLM, Ollama, LM Studio, llama.cpp
server, ...) over httpx, sync and async: a request that fails on the network
or with 408, 409, 429 or 5xx is retried ``max_retries`` times with
exponential backoff (honouring ``Retry-After``); anything else raises
:class:`LLMError`.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from memlane.errors import InvalidArgumentError, MemlaneError

if TYPE_CHECKING:
    import httpx

__all__ = ["LLM", "AsyncLLM", "ChatMessage", "LLMError", "OpenAIChat"]

ChatMessage = Mapping[str, str]

_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_MAX_BACKOFF = 30.0


class LLMError(MemlaneError, RuntimeError):
    """The language model could not be reached or gave no usable answer."""


@runtime_checkable
class LLM(Protocol):
    """A chat model: messages (``{"role": ..., "content": ...}``) in, text out."""

    def complete(self, messages: Sequence[ChatMessage]) -> str: ...


@runtime_checkable
class AsyncLLM(Protocol):
    """The async form of :class:`LLM`."""

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


class OpenAIChat:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the model name sent with each request.
        base_url: the API root; requests go to ``{base_url}/chat/completions``.
        api_key: a bearer token; defaults to ``$OPENAI_API_KEY`` (none if unset).
        temperature, max_tokens: sent when not None.
        timeout: seconds per request (connect, read, write).
        max_retries: retries of a failed request; backoff starts at ``backoff``
            seconds and doubles.
        extra: more fields for the request body (e.g. ``{"response_format": ...}``).
    """

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
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError("model must be a non-empty str")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be an int >= 0, got {max_retries!r}")
        for label, x in (("backoff", backoff), ("timeout", timeout)):
            if not (isinstance(x, int | float) and math.isfinite(x) and x >= 0):
                raise InvalidArgumentError(f"{label} must be a number >= 0, got {x!r}")
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - httpx is a dependency
            raise LLMError(f"httpx is not installed ({e}); pip install httpx") from None
        self._httpx = httpx
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.extra = dict(extra or {})
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

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
        """The model's reply to ``messages``; raises :class:`LLMError` when there is none."""
        return self._text(self._post(self._payload(messages, True, {})))

    async def acomplete(self, messages: Sequence[ChatMessage]) -> str:
        """The async form of :meth:`complete`."""
        return self._text(await self._apost(self._payload(messages, True, {})))

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
        return self._message(
            self._post(self._payload(messages, False, {"tools": tools, **options}))
        )

    async def achat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """The async form of :meth:`chat`."""
        body = self._payload(messages, False, {"tools": tools, **options})
        return self._message(await self._apost(body))

    def _post(self, body: dict[str, Any]) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._httpx.Client(timeout=self.timeout, headers=self._headers)
            client = self._client
        for attempt in range(self.max_retries + 1):
            response = None
            try:
                response = client.post(self.url, json=body)
            except self._httpx.HTTPError as e:
                if attempt == self.max_retries:
                    raise self._give_up(f"{type(e).__name__}: {e}") from None
            else:
                if response.status_code < 300:
                    return self._json(response)
                if response.status_code not in _RETRY_STATUS or attempt == self.max_retries:
                    raise self._give_up(f"HTTP {response.status_code}: {response.text[:300]}")
            time.sleep(self._delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _apost(self, body: dict[str, Any]) -> Any:
        if self._aclient is None:
            self._aclient = self._httpx.AsyncClient(timeout=self.timeout, headers=self._headers)
        client = self._aclient
        for attempt in range(self.max_retries + 1):
            response = None
            try:
                response = await client.post(self.url, json=body)
            except self._httpx.HTTPError as e:
                if attempt == self.max_retries:
                    raise self._give_up(f"{type(e).__name__}: {e}") from None
            else:
                if response.status_code < 300:
                    return self._json(response)
                if response.status_code not in _RETRY_STATUS or attempt == self.max_retries:
                    raise self._give_up(f"HTTP {response.status_code}: {response.text[:300]}")
            await asyncio.sleep(self._delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, response: Any) -> float:
        if response is not None:
            retry_after = response.headers.get("retry-after")
            try:
                if retry_after is not None:
                    return min(max(float(retry_after), 0.0), _MAX_BACKOFF)
            except ValueError:
                pass
        return float(min(self.backoff * 2**attempt, _MAX_BACKOFF))

    def _give_up(self, why: str) -> LLMError:
        return LLMError(
            f"{self.url} (model {self.model!r}) failed after {self.max_retries + 1} "
            f"attempt(s): {why}"
        )

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as e:
            raise LLMError(f"{self.url} returned a body that is not JSON: {e}") from None

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

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None

    def __enter__(self) -> OpenAIChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"
