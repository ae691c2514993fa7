"""memlane's WordPiece (``memlane._core.WordPiece``) against the ``tokenizers`` library on
the default model's tokenizer.json: the same ids, attention masks, token type ids,
character offsets and truncation, on generated Unicode and on real text; the same
vectors from the default embedder; and the default paths working without
``tokenizers`` installed."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO
from memlane._core import WordPiece
from memlane.embeddings import OnnxEmbedder
from memlane.embeddings._model_files import TOKENIZER_FILE
from memlane.embeddings._onnx import DEFAULT_MAX_LENGTH
from memlane.embeddings.tokenizer import HfTokenizer
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError, NotFoundError
from memlane.knowledge.chunking import TokenSplitter

tokenizers = pytest.importorskip("tokenizers")

PACKAGE_DATA = REPO / "python" / "memlane" / "data"
SHARED_DATA = REPO.parent / "shared" / "data"


@functools.cache
def reference(max_length: int | None) -> object:
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER_FILE))
    tok.no_padding()
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length)
    return tok


HF = reference(DEFAULT_MAX_LENGTH)
HF_WHOLE = reference(None)


@functools.cache
def ours(max_length: int | None) -> WordPiece:
    return WordPiece.from_file(TOKENIZER_FILE, max_length)


WP = ours(DEFAULT_MAX_LENGTH)
WP_WHOLE = ours(None)


def assert_same(text: str) -> None:
    """Both tokenizers agree on ``text``: cut at the model's limit with [CLS] and [SEP],
    and whole without them (as the chunker and the token counter use it)."""
    for hf, wp, special in ((HF, WP, True), (HF_WHOLE, WP_WHOLE, False)):
        want = hf.encode(text, add_special_tokens=special)  # type: ignore[attr-defined]
        got = wp.encode(text, add_special_tokens=special)
        assert got.ids == want.ids, text
        assert got.offsets == want.offsets, text
        assert got.truncated == bool(want.overflowing), text
        # memlane's embedder feeds ones and zeros of the encoding's length.
        assert want.attention_mask == [1] * len(got), text
        assert want.type_ids == [0] * len(got), text


def assert_same_batch(texts: list[str]) -> None:
    want = HF.encode_batch(texts)  # type: ignore[attr-defined]
    got = WP.encode_batch(texts)
    assert [e.ids for e in got] == [e.ids for e in want]
    assert [e.offsets for e in got] == [e.offsets for e in want]
    assert [e.truncated for e in got] == [bool(e.overflowing) for e in want]


# Characters each step of BERT's normalizer treats apart: accents and combining marks
# (some reordered by NFD), CJK ideographs, Hangul, controls and format characters,
# whitespace of every kind, punctuation (ASCII and not), emoji with joiners and
# modifiers, private use, U+FFFD, a character whose lowercase is two characters.
SPECIAL_CHARS = (
    "aZé\u0301\u0323\u0f73\u0344Åİß中文字\u3400\U00020000한국어ひらカタ"
    "\x00\x07\x1b\x7f\u200b\u200d\u00ad\ufeff\u202e\t\n\r \u00a0\u2003\u3000\u2028"
    ".,!?-'\"$+<=>^`|~#@(){}[]\\/¿¡«»…\u2014\u2013\u201c\u201d"
    "\U0001f600\U0001f44d\U0001f3fd\U0001f468\u200d\U0001f469\ufe0f\U0001f1eb\U0001f1f7"
    "\ue000\U000f0000\ufffd"
)
special_text = st.text(alphabet=st.sampled_from(SPECIAL_CHARS), max_size=60)
# Words around the 100-character limit of a WordPiece word, between whitespace runs.
long_words = st.lists(
    st.text(alphabet="abcdéxyz", min_size=90, max_size=110) | st.text(alphabet="ab", max_size=5),
    max_size=4,
).map(lambda words: " \t\n  ".join(words))
added_tokens = st.lists(
    st.sampled_from(["[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]", "[cls]", "[SEP", "x", " "]),
    max_size=10,
).map("".join)
texts = st.text(max_size=80) | special_text | long_words | added_tokens

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(texts)
def test_same_tokens_as_tokenizers(text: str) -> None:
    assert_same(text)


@SETTINGS
@given(st.lists(texts, max_size=8))
def test_same_batches_as_tokenizers(batch: list[str]) -> None:
    assert_same_batch(batch)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab [].é中", max_size=40), st.integers(0, 6))
def test_same_truncation_at_any_limit(text: str, max_length: int) -> None:
    want = reference(max_length).encode(text)  # type: ignore[attr-defined]
    got = ours(max_length).encode(text)
    assert (got.ids, got.offsets) == (want.ids, want.offsets)
    assert got.truncated == bool(want.overflowing)


def test_fixed_cases() -> None:
    for text in [
        "",
        " ",
        "Hello, world!",
        "İstanbul'da café naïve résumé",
        "北京大学的学生 and 東京",
        "a" * 100,
        "a" * 101,
        "un" + "believably" * 12,
        "[CLS] text [SEP][SEP]x[MASK]",
        "tab\tnew\nline\r\ncrlf\u2028sep",
        "\x00\ufffd\u200b\u00ad",
        "👍🏽 👨\u200d👩\u200d👧 🇫🇷",
        "x\u0301\u0323\u0f73y",
    ]:
        assert_same(text)


def test_package_texts() -> None:
    files = sorted(PACKAGE_DATA.rglob("*.md")) + sorted(PACKAGE_DATA.glob("*.txt"))
    assert files
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert_same(text)  # a whole document: cut at 256 tokens
        assert_same_batch([line for line in text.splitlines() if line.strip()])


def _shared_texts(relative: str, field: str, limit: int) -> list[str]:
    path = SHARED_DATA / relative
    if not path.is_file():
        pytest.skip(f"{relative} not found in ../shared/data beside the repository")
    with path.open(encoding="utf-8") as f:
        return [json.loads(line)[field] for _, line in zip(range(limit), f, strict=False)]


@pytest.mark.parametrize(
    ("relative", "field"),
    [("scifact/corpus.jsonl", "text"), ("wordnet/wordnet30_glosses.jsonl", "text")],
)
def test_shared_corpora(relative: str, field: str) -> None:
    batch = _shared_texts(relative, field, 500)
    assert_same_batch(batch)
    whole = HF_WHOLE.encode_batch(batch, add_special_tokens=False)  # type: ignore[attr-defined]
    got = WP_WHOLE.encode_batch(batch, add_special_tokens=False)
    assert [e.offsets for e in got] == [e.offsets for e in whole]


def test_default_embedder_vectors_equal_those_of_tokenizers() -> None:
    texts = [
        *_shared_texts("scifact/corpus.jsonl", "text", 6),
        "hello",
        "Café au lait, s'il vous plaît!",
        "北京大学",
        "[SEP] in the middle [CLS]",
    ]
    ours = OnnxEmbedder()
    theirs = OnnxEmbedder()
    theirs._tokenizer = HfTokenizer(
        tokenizers.Tokenizer.from_file(str(TOKENIZER_FILE)), theirs.max_length
    )
    want, want_cut = theirs.embed_batch(texts, return_truncated=True)
    got, got_cut = ours.embed_batch(texts, return_truncated=True)
    assert got_cut == want_cut and got_cut  # some abstracts pass 256 tokens
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(ours.embed(texts[-1]), theirs.embed(texts[-1]), atol=1e-6)


def test_other_tokenizer_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    config = json.loads(TOKENIZER_FILE.read_text(encoding="utf-8"))
    config["model"]["type"] = "WordLevel"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    refusal = r"is not a BERT WordPiece.*its model is WordLevel"
    with pytest.raises(InvalidArgumentError, match=refusal):
        WordPiece.from_file(path)
    with pytest.raises(NotFoundError):
        WordPiece.from_file(tmp_path / "missing.json")
    with pytest.raises(InvalidArgumentError, match="max_length must not be negative"):
        WordPiece.from_file(TOKENIZER_FILE, -1)
    with pytest.raises(InvalidArgumentError, match="text must be a str"):
        WP.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not a single str"):
        WP.encode_batch("one string")


@pytest.fixture
def no_tokenizers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import tokenizers`` fails, as in an install without the extra."""
    monkeypatch.setitem(sys.modules, "tokenizers", None)


@pytest.mark.usefixtures("no_tokenizers")
def test_default_paths_need_no_tokenizers(tmp_path: Path) -> None:
    from memlane.agent.context import char_token_count, default_token_counter

    vector = OnnxEmbedder().embed("hello world")
    assert vector.shape == (384,)
    splitter = TokenSplitter(chunk_size=4, chunk_overlap=1)
    assert splitter.count_tokens("hello world") == 2
    assert len(splitter.split("one two three four five six seven")) == 2
    default_token_counter.cache_clear()
    try:
        count = default_token_counter()
        assert count is not char_token_count
        assert count("hello world") == 2
    finally:
        default_token_counter.cache_clear()


@pytest.mark.usefixtures("no_tokenizers")
def test_other_tokenizers_name_the_extra_when_tokenizers_is_missing(tmp_path: Path) -> None:
    config = json.loads(TOKENIZER_FILE.read_text(encoding="utf-8"))
    config["pre_tokenizer"] = {"type": "Whitespace"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    extra = r"its pre_tokenizer is Whitespace.*pip install 'memlane\[tokenizers\]'"
    with pytest.raises(EmbedderUnavailableError, match=extra):
        OnnxEmbedder(tokenizer_path=path)
    with pytest.raises(InvalidArgumentError, match=extra):
        TokenSplitter(path)
