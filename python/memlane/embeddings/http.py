"""An embedder for any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama,
LM Studio, text-embeddings-inference, ...), sync and async, over httpx.

>>> emb = OpenAIEmbedder("text-embedding-3-small", dimension=1536)   # doctest: +SKIP
>>> emb.embed("User prefers dark mode").shape                        # doctest: +SKIP
(1536,)

Texts go in batches of ``batch_size``; a request that fails on the network or
with 408, 409, 429 or 5xx is retried ``max_retries`` times with exponential
backoff (honouring ``Retry-After``; see ``memlane.openai_http``). Each answer
is checked before a vector of it is used: one vector per text, each row naming its
text by an int ``index`` (0 to n-1, once each), every vector a list of numbers of
one width (the first answer's, when no ``dimension`` was given), the whole no
larger, and holding no more JSON values, than such vectors need; anything else raises
``EmbedderUnavailableError``.
Vectors come back L2-normalised, as the ``Embedder`` protocol promises. httpx is
imported when the first embedder is built, never by ``import memlane``.
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

_PATH = "embeddings"
_NUMBER = (int, float)
# An answer's limits (OpenAIEmbedder._limits), with generous room. Its size: a float
# written in JSON takes about 20 bytes ("-0.012345678901234567,"), pretty-printed perhaps
# 30; a row's other fields ("index", "object") a few dozen; the answer's own ("model",
# "usage") a few. Its JSON values, beyond the numbers: a few fields per row, a few more.
_NUMBER_ROOM = 48
_ROW_ROOM = 1024
_ANSWER_ROOM = 2**20
_ROW_VALUES = 64
_ANSWER_VALUES = 1024
# The width assumed until the first answer tells it: wider than any embedding model's.
_WIDEST = 16384


class OpenAIEmbedder(OpenAIHTTPClient):
    """Embeds with an OpenAI-compatible HTTP API.

    Args:
        model: the model name sent with each request.
        base_url: the API root; requests go to ``{base_url}/embeddings``.
        api_key: sent as a bearer token; defaults to ``$OPENAI_API_KEY`` (none
            for servers that need none).
        dimension: the vectors' length. Without it, the first answer fixes it (the
            first use of ``dimension`` embeds a probe text to learn it, the first batch
            sends its first text alone), and every later answer must match.
        dimensions: ask the server for shortened vectors (OpenAI's
            ``dimensions`` parameter); implies ``dimension``.
        name: the vector space's identifier; ``"openai:<model>"`` by default
            (with ``"@<dimensions>"`` when shortened).
        batch_size: texts per request.
        max_retries: retries of a failed request.
        backoff: seconds before the first retry, doubled at each (or the response's
            ``Retry-After``).
        timeout: seconds each try of a request may take, from connecting to the answer's
            last byte (a retry has as many again).
        headers: more headers for each request (printable ASCII).

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
            # The probe's answer fixes _dimension (in _parse).
            return int(self._request(["dimension probe"]).shape[1])
        return self._dimension

    def embed(self, text: str) -> FloatArray:
        check_text(text)
        out: FloatArray = self.embed_batch([text])[0]
        return out

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # In turn: the first answer fixes the width the next requests' limits take.
        return np.concatenate([self._request(batch) for batch in self._batches(items)])

    async def aembed_batch(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        batches = self._batches(items)
        # Until the width is known, the first request goes alone: its answer fixes the
        # width the others' limits take.
        parts = [await self._arequest(batches.pop(0))] if self._dimension is None else []
        parts += await asyncio.gather(*map(self._arequest, batches))
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

    def _batches(self, items: list[str]) -> list[list[str]]:
        """``items`` in requests of ``batch_size`` texts, but for the first text alone
        while the width is unknown: the limits of an answer assume the widest model's
        until then, which for 128 texts lets in some 100 MB, for one text 2 MB."""
        alone = 1 if self._dimension is None and len(items) > 1 else 0
        rest = range(alone, len(items), self.batch_size)
        return [items[:alone]] * alone + [items[i : i + self.batch_size] for i in rest]

    def _limits(self, n: int) -> tuple[int, int]:
        """The most bytes an answer of ``n`` vectors may take, and JSON values hold."""
        width = self._dimension or _WIDEST
        size = _ANSWER_ROOM + n * _ROW_ROOM + n * width * _NUMBER_ROOM
        return size, _ANSWER_VALUES + n * (width + _ROW_VALUES)

    def _request(self, texts: list[str]) -> FloatArray:
        n = len(texts)
        return self._parse(self._post_json(_PATH, self._payload(texts), *self._limits(n)), n)

    async def _arequest(self, texts: list[str]) -> FloatArray:
        answer = await self._apost_json(_PATH, self._payload(texts), *self._limits(len(texts)))
        return self._parse(answer, len(texts))

    def _parse(self, body: Any, n: int) -> FloatArray:
        """The ``n`` vectors of an answer, in the order of the texts, normalised; or
        ``EmbedderUnavailableError`` when the answer is not ``n`` of them, one per text,
        all of the store's width (the first answer fixes it when none was given)."""
        rows = body.get("data") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise self._unexpected("no 'data' list")
        if len(rows) != n:
            raise self._unexpected(f"{len(rows)} vectors for {n} texts")
        # The rows may come in any order; each names its text by 'index'. Ints only (not
        # bools, nor strings that would sort '10' before '2'), 0 to n-1 once each: else
        # a text would be given another text's vector.
        ordered: list[Any] = [None] * n
        for row in rows:
            if not isinstance(row, dict):
                raise self._unexpected(f"a row that is not an object ({type(row).__name__})")
            index = row.get("index")
            if type(index) is not int or not 0 <= index < n or ordered[index] is not None:
                raise self._unexpected(
                    f"rows whose 'index' values are not the ints 0 to {n - 1}, once each"
                )
            ordered[index] = row
        vectors = [row.get("embedding") for row in ordered]
        width = len(vectors[0]) if isinstance(vectors[0], list) else 0
        for v in vectors:
            # JSON's numbers only: numpy would read "1.5" and true as numbers too.
            if not isinstance(v, list) or len(v) != width or not all(type(x) in _NUMBER for x in v):
                raise self._unexpected(
                    "an 'embedding' that is not a list of numbers as long as the others"
                )
        if width < 1:
            raise self._unexpected("vectors of dimension 0")
        try:
            exact = np.array(vectors, dtype=np.float64)
        except OverflowError:  # an int too long for a float
            raise self._unexpected("a value beyond the range of floats") from None
        with np.errstate(over="ignore"):  # past float32's range: inf
            finite = np.all(np.isfinite(exact.astype(np.float32)))
        if not finite:
            raise self._unexpected("non-finite values, or values beyond float32's range")
        norms = np.linalg.norm(exact, axis=1, keepdims=True)
        # A zero vector has no direction to normalise, nor one a float32 norm cannot hold
        # (what a store refuses too); an error here keeps it out of an embedding cache.
        if np.any(norms < np.finfo(np.float32).tiny):
            raise self._unexpected("a vector of length zero, or too short to normalise")
        with self._lock:  # whichever answer comes first, concurrent ones are held to it
            if self._dimension is None:
                self._dimension = width
            expected = self._dimension
        if width != expected:
            raise self._unexpected(f"vectors of dimension {width}, expected {expected}")
        out: FloatArray = (exact / norms).astype(np.float32)
        return out

    def _unexpected(self, what: str) -> EmbedderUnavailableError:
        return EmbedderUnavailableError(f"{self.base_url}/embeddings returned {what}")
