"""Content normalisation behind dedup hashes: the ASCII shortcut agrees with the general path."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from memlane.content_hash import content_hash, normalise_text


def reference(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_texts_normalise_as_the_general_path_does(text: str) -> None:
    assert normalise_text(text) == reference(text)


@given(st.text())
def test_any_text_normalises_to_nfkc_casefolded_collapsed_whitespace(text: str) -> None:
    assert normalise_text(text) == reference(text)


def test_same_content_same_hash() -> None:
    assert content_hash("  User  prefers\tDARK mode ") == content_hash("user prefers dark mode")
    assert content_hash("Straße") == content_hash("STRASSE")  # full case folding
    assert content_hash("ﬁle") == content_hash("file")  # NFKC ligature
    assert content_hash("dark mode") != content_hash("light mode")
