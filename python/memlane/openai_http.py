"""The HTTP side of memlane's OpenAI-compatible clients (``OpenAIEmbedder``,
``OpenAIChat``): their base class, ``OpenAIHTTPClient``.

It holds the connection settings (``base_url``, a bearer ``api_key`` defaulting
to ``$OPENAI_API_KEY``, extra ``headers``, ``timeout``), one httpx client for
sync calls and one for async calls (each opened at its first request), JSON
POSTs with retries, and closing (``close``,
``aclose``, ``with`` and ``async with``).

A POST that fails on the network (a connection error, a timeout, any other
httpx error) or with HTTP 408, 409, 429 or 5xx (500, 502, 503, 504) is tried
again, ``max_retries`` times at most. The wait before retry ``n`` (from 0) is
``backoff * 2**n`` seconds, or the response's ``Retry-After`` seconds when it
gives a number; never more than 30. A failure that may not be retried, or the
last one, raises the subclass's own error (``_error``), naming the URL, the
model, the tries and the cause. httpx is imported when the first client object
is built, never by ``import memlane``.

The retry loop is memlane's own, not tenacity's: it is one decision
(``_verdict``, shared by the sync and async paths) and two
eight-line loops. With tenacity the same needs a retry predicate over responses
and exceptions, a wait callback that reads ``Retry-After`` from the last outcome,
unwrapping its ``RetryError`` into ``_error`` and its own sync and async retryers:
as much code, plus a dependency.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

from memlane.errors import InvalidArgumentError, MemlaneError, shown

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_WAIT", "RETRY_STATUS", "OpenAIHTTPClient"]

#: Statuses worth another try: the server is busy, overloaded or briefly broken.
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
#: The longest wait between tries, in seconds, whatever ``Retry-After`` asks.
MAX_WAIT = 30.0

# The waits between tries; tests replace them to see the waits without waiting.
_sleep = time.sleep
_asleep = asyncio.sleep


class OpenAIHTTPClient:
    """Base of the clients of an OpenAI-compatible API (see the module's doc).

    Subclasses set ``_error`` to the exception they raise and call
    ``_post_json`` / ``_apost_json`` with a path under ``base_url``.
    """

    _error: ClassVar[type[MemlaneError]] = MemlaneError

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None,
        timeout: float,
        max_retries: int,
        backoff: float,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError("model must be a non-empty str")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be an int >= 0, got {shown(max_retries)}")
        for label, x in (("backoff", backoff), ("timeout", timeout)):
            if not (isinstance(x, int | float) and math.isfinite(x) and x >= 0):
                raise InvalidArgumentError(f"{label} must be a number >= 0, got {shown(x)}")
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - httpx is a dependency
            raise self._error(
                f"httpx is not installed ({e}); install it with: pip install httpx"
            ) from None
        self._httpx = httpx
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        self._lock = threading.Lock()

    # -- requests ---------------------------------------------------------------------------

    def _post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` to ``{base_url}/{path}`` and return the decoded JSON answer."""
        with self._lock:
            if self._client is None:
                self._client = self._httpx.Client(timeout=self.timeout, headers=self._headers)
            client = self._client
        url = f"{self.base_url}/{path}"
        attempt = 0
        while True:
            try:
                outcome: httpx.Response | Exception = client.post(url, json=body)
            except self._httpx.HTTPError as e:
                outcome = e
            verdict = self._verdict(url, attempt, outcome)
            if not isinstance(verdict, float):
                return self._decode(url, verdict)
            _sleep(verdict)
            attempt += 1

    async def _apost_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """The async form of ``_post_json``."""
        if self._aclient is None:
            self._aclient = self._httpx.AsyncClient(timeout=self.timeout, headers=self._headers)
        client = self._aclient
        url = f"{self.base_url}/{path}"
        attempt = 0
        while True:
            try:
                outcome: httpx.Response | Exception = await client.post(url, json=body)
            except self._httpx.HTTPError as e:
                outcome = e
            verdict = self._verdict(url, attempt, outcome)
            if not isinstance(verdict, float):
                return self._decode(url, verdict)
            await _asleep(verdict)
            attempt += 1

    def _verdict(
        self, url: str, attempt: int, outcome: httpx.Response | Exception
    ) -> httpx.Response | float:
        """After try ``attempt`` (from 0) ended in ``outcome``: the response if it
        succeeded, the seconds to wait before the next try if there is one, else
        raises ``_error``."""
        if isinstance(outcome, Exception):
            why, again = f"{type(outcome).__name__}: {outcome}", True
        elif outcome.status_code < 300:
            return outcome
        else:
            why = f"HTTP {outcome.status_code}: {outcome.text[:300]}"
            again = outcome.status_code in RETRY_STATUS
        if not again or attempt >= self.max_retries:
            raise self._error(
                f"{url} (model {self.model!r}) failed after {attempt + 1} attempt(s): {why}"
            )
        asked = None if isinstance(outcome, Exception) else _retry_after(outcome)
        if asked is not None:
            return min(max(asked, 0.0), MAX_WAIT)
        return min(self.backoff * 2.0 ** min(attempt, 64), MAX_WAIT)

    def _decode(self, url: str, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as e:
            raise self._error(f"{url} returned a body that is not JSON: {e}") from None

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the sync connections; a later call opens new ones."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the async connections; a later call opens new ones."""
        client, self._aclient = self._aclient, None
        if client is not None:
            await client.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
        self.close()


def _retry_after(response: httpx.Response) -> float | None:
    """The response's ``Retry-After`` when it is a number of seconds (not an HTTP date)."""
    try:
        seconds = float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None
