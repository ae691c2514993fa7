"""Tests of the BM25 analyzer (`memlane.analyze`): segmentation, stopwords, stemming, folding."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import memlane
from memlane import InvalidArgumentError, analyze

try:  # PyStemmer: the C Snowball stemmer that bm25s uses; a benchmark extra.
    import Stemmer as PyStemmer
except ImportError:  # pragma: no cover - depends on the environment
    PyStemmer = None

needs_pystemmer = pytest.mark.skipif(PyStemmer is None, reason="PyStemmer is not installed")

LANGUAGES = [
    *("arabic", "danish", "dutch", "english", "finnish", "french", "german", "greek"),
    *("hungarian", "italian", "norwegian", "portuguese", "romanian", "russian", "spanish"),
    *("swedish", "tamil", "turkish"),
]

# Lucene's classic English stop set, which bm25s also uses.
LUCENE_ENGLISH_STOPWORDS = [
    *("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into"),
    *("is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then"),
    *("there", "these", "they", "this", "to", "was", "will", "with"),
]


def test_contract_example() -> None:
    assert analyze("Running quickly!", language="english") == ["run", "quick"]


def test_english_pipeline() -> None:
    assert analyze("The patient\u2019s Generalizations, and IL-6.") == [
        "patient",
        "general",
        "il",
        "6",
    ]
    # Sentences run together without a space split; numbers stay whole.
    assert analyze("disabilities.A line, e.g. 3.5 mg") == ["disabl", "line", "e", "g", "3.5", "mg"]


def test_english_stopwords_are_lucenes() -> None:
    text = " ".join(LUCENE_ENGLISH_STOPWORDS)
    assert analyze(text, stemming=False) == []
    kept = analyze(text, stopwords=False, stemming=False)
    assert kept == LUCENE_ENGLISH_STOPWORDS


def test_english_stopwords_match_bm25s() -> None:
    stopwords = pytest.importorskip("bm25s.stopwords")
    assert set(stopwords.STOPWORDS_EN) == set(LUCENE_ENGLISH_STOPWORDS)


@needs_pystemmer
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=20))
def test_stems_match_pystemmer(word: str) -> None:
    stem = PyStemmer.Stemmer("english").stemWord(word)
    assert analyze(word, stopwords=False) == ([stem] if stem else [])


@needs_pystemmer
def test_stems_match_pystemmer_on_real_words() -> None:
    stemmer = PyStemmer.Stemmer("english")
    words = [
        *("running", "generalizations", "cells", "proteins", "studies", "increased"),
        *("expression", "patients", "associated", "mutations", "regulation", "analysis"),
        *("mice", "inhibition", "differentiation", "caresses", "ponies", "ties", "cats"),
        *("feed", "agreed", "plastered", "motoring", "sing", "conflated", "troubled"),
        *("sized", "hopping", "tanned", "falling", "hissing", "fizzed", "failing", "happy"),
    ]
    for word in words:
        assert analyze(word, stopwords=False) == [stemmer.stemWord(word)], word


def test_switches() -> None:
    assert analyze("The Running dogs", stopwords=False, stemming=False) == [
        "the",
        "running",
        "dogs",
    ]
    assert analyze("the running dogs", stopwords=["RUNNING"]) == ["the", "dog"]
    assert analyze("the running dogs", stopwords=[]) == ["the", "run", "dog"]
    assert analyze("the running dogs", stopwords=None) == ["the", "run", "dog"]  # type: ignore[arg-type]


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_stems_and_stops(language: str) -> None:
    sample = "The quick brown fox jumps over the lazy dog 東京 ça été"
    terms = analyze(sample, language=language)
    assert terms and all(terms)
    assert analyze(sample, language=language.upper()) == terms


def test_language_specific_behaviour() -> None:
    assert analyze("die Häuser und der Hund", language="german") == ["haus", "hund"]
    assert analyze("les maisons", language="french") == ["maison"]
    assert analyze("в доме", language="russian") == ["дом"]


def test_bad_options() -> None:
    with pytest.raises(InvalidArgumentError, match="must be one of"):
        analyze("x", language="klingon")
    with pytest.raises(InvalidArgumentError, match="stopwords"):
        analyze("x", stopwords="english")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="stopwords"):
        analyze("x", stopwords=[1, 2])  # type: ignore[list-item]


def test_spaceless_scripts_become_bigrams() -> None:
    assert analyze("東京都") == ["東京", "京都"]
    assert analyze("猫") == ["猫"]
    assert analyze("東京カタカナ都") == ["東京", "カタカナ", "都"]
    thai = analyze("ภาษาไทยเป็นภาษาที่สวยงาม")
    assert len(thai) > 5
    assert all(len(t) <= 6 for t in thai)


def test_any_script() -> None:
    assert analyze("한국어 텍스트") == ["한국어", "텍스트"]
    assert analyze("שלום עולם") == ["שלום", "עולם"]
    assert analyze("مرحبا بالعالم", language="arabic")
    assert analyze("👍🏽🎉 hello🎉world\x00x") == ["hello", "world", "x"]
    # Combining marks stay with their letter, and case folds with them.
    assert analyze("E\u0301TE\u0301") == analyze("e\u0301te\u0301")
    assert analyze("🎉🎉 ... !!! \x00") == []


def test_fold_accents() -> None:
    assert analyze("café", fold_accents=True) == ["cafe"]
    assert analyze("café") == ["café"]
    assert analyze("Straße Øre", fold_accents=True, stemming=False) == ["strasse", "ore"]
    french = analyze("élève élevé", language="french", fold_accents=True)
    assert all(t.isascii() for t in french)


def test_million_character_token_is_cut() -> None:
    terms = analyze("x" * 1_000_000, stemming=False)
    assert terms == ["x" * 64]


@settings(max_examples=300, deadline=None)
@given(st.text())
@example("\x1f\U00011a51")  # a combining mark after a control character
def test_any_text_is_analyzed(text: str) -> None:
    try:
        terms = analyze(text)
    except InvalidArgumentError:
        # Lone surrogates cannot become UTF-8; that is the only refusal.
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in text)
        return
    for term in terms:
        assert term
        assert not any(c.isspace() for c in term)
        assert len(term) <= 2 * 64


def test_lone_surrogate_is_refused_clearly() -> None:
    with pytest.raises(InvalidArgumentError):
        analyze("bad \ud800 text")


def test_index_analyzer_matches_function() -> None:
    bm = memlane.BM25Index(language="french", stopwords=["le"], stemming=True, fold_accents=True)
    text = "Le château et les élèves"
    assert bm.analyze(text) == analyze(text, language="french", stopwords=["le"], fold_accents=True)
