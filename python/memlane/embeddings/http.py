"""An embedder for any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama,
LM Studio, text-embeddings-inference, ...), sync and async, over httpx.

>>> emb = OpenAIEmbedder("text-embedding-3-small", dimension=1536)   # doctest: +SKIP
>>> emb.embed("User prefers dark mode").shape                        # doctest: +SKIP
(1536,)

Texts go in batches of ``batch_size``; a request that fails on the network or
with 408, 409, 429 or 5xx is retried ``max_retries`` times with exponential
backoff (honouring ``Retry-After``). Vectors come back L2-normalised, as the
:class:`~memlane.embeddings.Embedder` protocol promises. httpx is imported
when the first embedder is built, never by ``import memlane``.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from memlane.embeddings._base import FloatArray, check_text, check_texts
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIEmbedder"]

_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_MAX_BACKOFF = 30.0


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as e:  # pragma: no cover - httpx is a dependency
        raise EmbedderUnavailableError(
            f"httpx is not installed ({e}); install it with: pip install httpx"
        ) from None
    return httpx


class OpenAIEmbedder:
    """Embeds with an OpenAI-compatible HTTP API.

    Args:
        model: the model name sent with each request.
        base_url: the API root; requests go to ``{base_url}/embeddings``.
        api_key: sent as a bearer token; defaults to ``$OPENAI_API_KEY`` (none
            for servers that need none).
        dimension: the vectors' length. Without it, the first use of
            :attr:`dimension` embeds a probe text to learn it.
        dimensions: ask the server for shortened vectors (OpenAI's
            ``dimensions`` parameter); implies ``dimension``.
        name: the vector space's identifier; ``"openai:<model>"`` by default
            (with ``"@<dimensions>"`` when shortened).
        batch_size: texts per request.
        max_retries: retries of a failed request; backoff starts at ``backoff``
            seconds and doubles.
        timeout: seconds per request.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        dimension: int | None = None,
        dimensions: int | None = None,
        name: str | None = None,
        batch_size: int = 128,
        max_retries: int = 3,
        backoff: float = 0.5,
        timeout: float = 30.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError("model must be a non-empty str")
        for label, value, low in (
            ("batch_size", batch_size, 1),
            ("max_retries", max_retries, 0),
            ("dimension", dimension, 1),
            ("dimensions", dimensions, 1),
        ):
            if value is None and label.startswith("dimension"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidArgumentError(f"{label} must be an int >= {low}, got {value!r}")
        if dimension is not None and dimensions is not None and dimension != dimensions:
            raise InvalidArgumentError(f"dimension {dimension} != dimensions {dimensions}")
        for label, x in (("backoff", backoff), ("timeout", timeout)):
            if not (isinstance(x, int | float) and math.isfinite(x) and x >= 0):
                raise InvalidArgumentError(f"{label} must be a number >= 0, got {x!r}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.timeout = float(timeout)
        self._dimensions = dimensions
        self._dimension = dimension if dimension is not None else dimensions
        self._name = name or (f"openai:{model}" + (f"@{dimensions}" if dimensions else ""))
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._httpx = _httpx()
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        self._lock = threading.Lock()

    # -- the protocol --------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = int(self._request(["dimension probe"]).shape[1])
        return self._dimension

    def embed(self, text: str) -> FloatArray:
        check_text(text)
        out: FloatArray = self.embed_batch([text])[0]
        return out

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [
            self._request(items[i : i + self.batch_size])
            for i in range(0, len(items), self.batch_size)
        ]
        return np.concatenate(parts)

    async def aembed(self, text: str) -> FloatArray:
        check_text(text)
        out: FloatArray = (await self.aembed_batch([text]))[0]
        return out

    async def aembed_batch(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = await asyncio.gather(
            *(
                self._arequest(items[i : i + self.batch_size])
                for i in range(0, len(items), self.batch_size)
            )
        )
        return np.concatenate(parts)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None

    def __repr__(self) -> str:
        return (
            f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r}, "
            f"dimension={self._dimension}, batch_size={self.batch_size})"
        )

    # -- requests ---------------------------------------------------------------------------

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": texts}
        if self._dimensions is not None:
            payload["dimensions"] = self._dimensions
        return payload

    def _delay(self, attempt: int, response: Any) -> float:
        if response is not None:
            retry_after = response.headers.get("retry-after")
            try:
                if retry_after is not None:
                    return min(max(float(retry_after), 0.0), _MAX_BACKOFF)
            except ValueError:
                pass
        return float(min(self.backoff * 2**attempt, _MAX_BACKOFF))

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = self._httpx.Client(timeout=self.timeout, headers=self._headers)
            return self._client

    def _request(self, texts: list[str]) -> FloatArray:
        client = self._sync_client()
        url = f"{self.base_url}/embeddings"
        for attempt in range(self.max_retries + 1):
            response = None
            try:
                response = client.post(url, json=self._payload(texts))
            except self._httpx.HTTPError as e:
                if attempt == self.max_retries:
                    raise self._give_up(f"{type(e).__name__}: {e}") from None
            else:
                if response.status_code < 300:
                    return self._parse(response, len(texts))
                if response.status_code not in _RETRY_STATUS or attempt == self.max_retries:
                    raise self._give_up(f"HTTP {response.status_code}: {response.text[:300]}")
            time.sleep(self._delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _arequest(self, texts: list[str]) -> FloatArray:
        if self._aclient is None:
            self._aclient = self._httpx.AsyncClient(timeout=self.timeout, headers=self._headers)
        client = self._aclient
        url = f"{self.base_url}/embeddings"
        for attempt in range(self.max_retries + 1):
            response = None
            try:
                response = await client.post(url, json=self._payload(texts))
            except self._httpx.HTTPError as e:
                if attempt == self.max_retries:
                    raise self._give_up(f"{type(e).__name__}: {e}") from None
            else:
                if response.status_code < 300:
                    return self._parse(response, len(texts))
                if response.status_code not in _RETRY_STATUS or attempt == self.max_retries:
                    raise self._give_up(f"HTTP {response.status_code}: {response.text[:300]}")
            await asyncio.sleep(self._delay(attempt, response))
        raise AssertionError("unreachable")  # pragma: no cover

    def _give_up(self, why: str) -> EmbedderUnavailableError:
        tries = self.max_retries + 1
        return EmbedderUnavailableError(
            f"{self.base_url}/embeddings (model {self.model!r}) failed after {tries} "
            f"attempt(s): {why}"
        )

    def _parse(self, response: Any, n: int) -> FloatArray:
        try:
            data = response.json()["data"]
            rows = sorted(data, key=lambda d: d.get("index", 0))
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            raise EmbedderUnavailableError(
                f"{self.base_url}/embeddings returned an unexpected body: {e}"
            ) from None
        if vectors.ndim != 2 or vectors.shape[0] != n:
            raise EmbedderUnavailableError(
                f"{self.base_url}/embeddings returned {vectors.shape[0]} vectors for {n} texts"
            )
        if self._dimension is not None and vectors.shape[1] != self._dimension:
            raise EmbedderUnavailableError(
                f"{self.base_url}/embeddings returned vectors of dimension {vectors.shape[1]}, "
                f"expected {self._dimension}"
            )
        if not np.all(np.isfinite(vectors)):
            raise EmbedderUnavailableError(f"{self.base_url}/embeddings returned non-finite values")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out: FloatArray = (vectors / norms).astype(np.float32)
        return out
