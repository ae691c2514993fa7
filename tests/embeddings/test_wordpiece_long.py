"""memlane's WordPiece on long texts: normalized a piece at a time, it gives the ids,
offsets and truncation of the ``tokenizers`` library on texts of many pieces, and a text
of megabytes cut at the model's limit costs the memory of its first tokens; a run of
combining marks (Zalgo text), which has no place where a piece may end, is cut 64 KB on
all the same, and costs what a plain text of its size costs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_wordpiece import reference  # the tokenizers library set as memlane sets its own

from memlane._core import WordPiece
from memlane.embeddings._model_files import TOKENIZER_FILE
from memlane.embeddings._onnx import DEFAULT_MAX_LENGTH

tokenizers = pytest.importorskip("tokenizers")

# What each step of BERT's normalizer treats apart (as tests/embeddings/test_wordpiece.py
# lists them), marks that NFD reorders, U+0F73 (which becomes two), characters that
# cleaning removes, and words around the 100-character limit.
ALPHABET = (
    "aZé\u0301\u0323\u0f73\u0344\U0001d16d\U0001d165Åİß中文\u3400한\x00\x07\u200b\u200d\u00ad"
    "\ufeff\t\n \u00a0\u3000.,!-'¿«…\u2014\U0001f600\U0001f44d\U0001f3fd\ue000\ufffd"
)
piece = st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=40) | st.sampled_from(
    ["x" * 99, "y" * 101, " [SEP] ", "[CLS]", "un" + "believably" * 12]
)
# Texts of 3,000 to 12,000 characters: several of the 2,048-byte pieces.
long_texts = st.lists(piece, min_size=1, max_size=30).map(
    lambda parts: "".join(parts) * (3_000 // len("".join(parts)) + 1)
)


HF, HF_WHOLE = reference(DEFAULT_MAX_LENGTH), reference(None)
WP, WP_WHOLE = (
    WordPiece.from_file(TOKENIZER_FILE, DEFAULT_MAX_LENGTH),
    WordPiece.from_file(TOKENIZER_FILE),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_texts)
def test_long_texts_give_the_tokens_of_tokenizers(text: str) -> None:
    for hf, wp, special in ((HF, WP, True), (HF_WHOLE, WP_WHOLE, False)):
        want = hf.encode(text, add_special_tokens=special)  # type: ignore[attr-defined]
        got = wp.encode(text, add_special_tokens=special)
        assert got.ids == want.ids
        assert got.offsets == want.offsets
        assert got.truncated == bool(want.overflowing)


def test_a_huge_text_gives_the_tokens_of_its_start() -> None:
    text = "Unaffable naïve 北京 café, s'il vous plaît! " * 200_000
    got = WP.encode(text)
    assert got.ids == WP.encode(text[:2_000]).ids and got.truncated
    assert len(got.ids) == DEFAULT_MAX_LENGTH


# The peak is read from /proc (VmHWM), before and after the encoding, in a child of its own.
CHILD = """
import re
from memlane._core import WordPiece
from memlane.embeddings._model_files import TOKENIZER_FILE

def peak():
    return int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())[1]) // 1024

wp = WordPiece.from_file(TOKENIZER_FILE, 256)
text = "word " * 2_000_000
wp.encode("warm up")
before = peak()
encoding = wp.encode(text)
assert len(encoding.ids) == 256 and encoding.truncated
print(peak() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_10_mb_text_costs_the_memory_of_its_first_tokens() -> None:
    """Normalized whole, the text took 24 bytes a character and 8 more for its byte
    offsets: over 300 MB for the 256 tokens kept."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert child.returncode == 0, child.stderr[-2000:]
    grown = int(child.stdout.strip())
    # The text's own copy (10 MB) and little else.
    assert grown < 40, f"peak RSS grew by {grown} MB"


# Runs of nonspacing marks longer than a piece may grow (2 KB and 64 KB more): classes
# that NFD sorts apart (1, 220, 230), marks made of two (U+0344, U+0F73), characters that
# cleaning removes between them, and words, ideographs and an added token around them.
MARK_RUNS = [
    "hello " + "\u0301" * 100_000 + " world",
    "Z" + "\u0336\u0301\u0317" * 40_000 + "algo text",
    "\u200b\u0301" * 50_000 + "word",
    "na\u0344" + "\u0f73" * 40_000 + "ive 中文",
    "\x00" * 100_000 + "\u0301" * 50_000 + " un [SEP] two",
    "\u0301" * 70_000 + "中" + "\u0327\u0301" * 40_000 + ", après",
]


@pytest.mark.parametrize("text", MARK_RUNS, ids=range(len(MARK_RUNS)))
def test_runs_of_marks_longer_than_a_piece_give_the_tokens_of_tokenizers(text: str) -> None:
    for hf, wp, special in ((HF, WP, True), (HF_WHOLE, WP_WHOLE, False)):
        want = hf.encode(text, add_special_tokens=special)  # type: ignore[attr-defined]
        got = wp.encode(text, add_special_tokens=special)
        assert (got.ids, got.offsets) == (want.ids, want.offsets)
        assert got.truncated == bool(want.overflowing)


# In a child of its own each (the peak only rises): the peak's growth, in MB, while
# WordPiece's method argv[1] encodes what argv[2] makes.
MARKS_CHILD = """
import re, sys
from memlane._core import WordPiece
from memlane.embeddings._model_files import TOKENIZER_FILE

def peak():
    return int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())[1]) // 1024

wp = WordPiece.from_file(TOKENIZER_FILE, 256)
encode, texts = getattr(wp, sys.argv[1]), eval(sys.argv[2])
wp.encode("warm up")
before = peak()
encode(texts)
print(peak() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize(
    ("method", "texts", "most"),
    [
        # 10 MB as UTF-8, whose copies cost that much, as for "word " * 2,000,000.
        ("encode", '"hello " + "\\u0301" * 5_000_000', 40),
        ("encode", '"Z" + "\\u0336\\u0301\\u0317" * 1_700_000', 40),
        ("encode", '"\\u200b\\u0301" * 2_000_000', 40),
        # 4 texts of 5 MB, as for 4 texts of 2,500,000 "é".
        ("encode_batch", '[f"t{i} " + "\\u0301" * 2_500_000 for i in range(4)]', 60),
    ],
    ids=["accents", "zalgo", "zero-width-and-accents", "batch"],
)
def test_a_run_of_marks_costs_the_memory_of_a_plain_text(
    method: str, texts: str, most: int
) -> None:
    """Normalized whole, a run of marks took 70 bytes a character: 332 MB for 5 million,
    and a batch of 8 texts of 2.5 million 415 MB."""
    child = subprocess.run(
        [sys.executable, "-c", MARKS_CHILD, method, texts],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    grown = int(child.stdout.strip())
    assert grown < most, f"peak RSS grew by {grown} MB"
