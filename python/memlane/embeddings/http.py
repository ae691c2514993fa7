"""An embedder for any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama,
LM Studio, text-embeddings-inference, ...), sync and async, over httpx.

>>> emb = OpenAIEmbedder("text-embedding-3-small", dimension=1536)   # doctest: +SKIP
>>> emb.embed("User prefers dark mode").shape                        # doctest: +SKIP
(1536,)

Texts go in batches of ``batch_size``; a request that fails on the network or
with 408, 409, 429 or 5xx is retried ``max_retries`` times with exponential
backoff (honouring ``Retry-After``; see ``memlane.openai_http``). Vectors
come back L2-normalised, as the ``Embedder`` protocol
promises. httpx is imported when the first embedder is built, never by
``import memlane``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memlane.embeddings._base import FloatArray, check_text, check_texts
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError, shown
from memlane.openai_http import OpenAIHTTPClient

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder(OpenAIHTTPClient):
    """Embeds with an OpenAI-compatible HTTP API.

    Args:
        model: the model name sent with each request.
        base_url: the API root; requests go to ``{base_url}/embeddings``.
        api_key: sent as a bearer token; defaults to ``$OPENAI_API_KEY`` (none
            for servers that need none).
        dimension: the vectors' length. Without it, the first use of
            ``dimension`` embeds a probe text to learn it.
        dimensions: ask the server for shortened vectors (OpenAI's
            ``dimensions`` parameter); implies ``dimension``.
        name: the vector space's identifier; ``"openai:<model>"`` by default
            (with ``"@<dimensions>"`` when shortened).
        batch_size: texts per request.
        max_retries: retries of a failed request.
        backoff: seconds before the first retry, doubled at each (or the response's
            ``Retry-After``).
        timeout: seconds per request.
        headers: more headers for each request.

    [`close`][memlane.OpenAIEmbedder.close] / [`aclose`][memlane.OpenAIEmbedder.aclose]
    (or ``with`` / ``async with``) release the connections.
    """

    _error = EmbedderUnavailableError

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
        headers: Mapping[str, str] | None = None,
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
        for label, value in (
            ("batch_size", batch_size),
            ("dimension", dimension),
            ("dimensions", dimensions),
        ):
            if value is None and label.startswith("dimension"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{label} must be an int >= 1, got {shown(value)}")
        if dimension is not None and dimensions is not None and dimension != dimensions:
            raise InvalidArgumentError(f"dimension {dimension} != dimensions {dimensions}")
        self.batch_size = batch_size
        self._dimensions = dimensions
        self._dimension = dimension if dimension is not None else dimensions
        self._name = name or (f"openai:{model}" + (f"@{dimensions}" if dimensions else ""))

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

    def _request(self, texts: list[str]) -> FloatArray:
        return self._parse(self._post_json("embeddings", self._payload(texts)), len(texts))

    async def _arequest(self, texts: list[str]) -> FloatArray:
        return self._parse(await self._apost_json("embeddings", self._payload(texts)), len(texts))

    def _parse(self, body: Any, n: int) -> FloatArray:
        try:
            data = body["data"]
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
