"""``bench_fact_candidates.py`` small (two users of the dated set, six LoCoMo pairs), so
that it cannot rot; the LoCoMo pairs checked against the data they name; and the search
by each sentence of a fact that ``candidates()`` adds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import _locomo
import bench_fact_candidates as bench
import memlane
from _conversations import generate
from memlane.agent.facts import candidates, pending


def test_the_dated_changes_are_found(capsys: pytest.CaptureFixture[str]) -> None:
    result = bench.main(["--sets", "dated", "--users", "2"])
    changed = [q for q in generate(seed=0, users=2).questions if q.changed]
    rows = result["rows"]
    assert Counter(r["store"] for r in rows) == {"default": len(changed), "text": len(changed)}
    assert {(r["old"], r["new"]) for r in rows} == {
        (q.superseded[0], q.evidence[0]) for q in changed
    }
    # The fact check shows the old version of every changed fact, with vectors or not.
    assert all(r["candidates"] for r in rows)
    out = capsys.readouterr().out
    assert "dated/default" in out and "dated/text" in out and "UNDER THE GOAL" not in out


@pytest.mark.skipif(not _locomo.available(), reason=f"{_locomo.FILE} is missing")
def test_the_locomo_pairs_name_changes_of_one_speaker() -> None:
    pairs = json.loads(bench.CHANGES.read_text(encoding="utf-8"))["pairs"]
    assert len(pairs) >= 30
    turns = {t.id: t for t in _locomo.load()[0]}
    for p in pairs:
        old = turns[f"{p['conversation']}/{p['old']}"]
        new = turns[f"{p['conversation']}/{p['new']}"]
        assert old.speaker == new.speaker == p["speaker"]
        assert old.session != new.session and old.at < new.at  # across sessions
        assert p["attribute"].strip()


@pytest.mark.skipif(not _locomo.available(), reason=f"{_locomo.FILE} is missing")
def test_the_locomo_changes_are_measured(capsys: pytest.CaptureFixture[str]) -> None:
    result = bench.main(["--sets", "locomo", "--pairs", "6", "--stores", "text", "--misses"])
    rows = result["rows"]
    assert len(rows) == 6 and {r["set"] for r in rows} == {"locomo"}
    assert {r["store"] for r in rows} == {"text"}
    assert all(r["shown"] >= 5 for r in rows)  # the scope's newest at least
    out = capsys.readouterr().out
    assert "locomo/text" in out and "share a content word" in out
    for r in rows:  # the words the two versions share, as the store's analyzer makes them
        assert set(r["content"]) <= set(r["shared"]) <= set(memlane.analyze(r["new_text"]))


NOUNS = [
    "harbour",
    "lantern",
    "violin",
    "orchard",
    "pebble",
    "meadow",
    "glacier",
    "compass",
    "falcon",
    "quarry",
    "tulip",
    "anchor",
    "saddle",
    "marble",
    "thistle",
    "beacon",
    "walrus",
    "canyon",
    "parsley",
    "furnace",
    "ribbon",
    "kettle",
    "almond",
    "vortex",
]


def test_a_sentence_of_a_fact_finds_what_it_changes(tmp_path: Path) -> None:
    """A fact of several sentences: the words of its first sentence are in every newer
    memory, so a search by the whole fact ranks them first; the search by its last
    sentence finds the memory that sentence changes. In a store without vectors."""
    scope = {"user_id": "jon"}
    with memlane.Memory(tmp_path / "s", embedder=None) as mem:
        mem.add("Lost my job at the bank yesterday.", created_at=1000.0, **scope)
        for i in range(len(NOUNS)):
            words = " and ".join(NOUNS[(i + j) % len(NOUNS)] for j in range(3))
            mem.add(f"Thinking about {words}.", created_at=2000.0 + i, **scope)
        text = f"Today I saw {', '.join(NOUNS)}. I got a temp job to pay the bills."
        fact = mem.add(text, created_at=5000.0, metadata=pending(None), **scope)
        found = [r.text for r in candidates(mem, fact, "memories", scope)]
    assert "Lost my job at the bank yesterday." in found
    assert fact.text not in found


@pytest.mark.skipif(not _locomo.available(), reason=f"{_locomo.FILE} is missing")
def test_the_locomo_fact_pairs_name_observations_of_their_turns() -> None:
    """Each pair of ``locomo_fact_changes.json`` names two observations of its speaker, of
    the sessions of its turns, the old one learnt first."""
    pairs = json.loads(bench.FACT_CHANGES.read_text(encoding="utf-8"))["pairs"]
    assert len(pairs) >= 25
    data = {c["sample_id"]: c for c in json.loads(_locomo.FILE.read_text(encoding="utf-8"))}
    for p in pairs:
        learnt = bench.observations(data[p["conversation"]], p["speaker"])
        order = [m.id for m in learnt]
        old, new = (f"{p['conversation']}/{p[side]}" for side in ("old", "new"))
        assert order.index(old) < order.index(new)
        for ref, turn in zip((p["old"], p["new"]), p["turns"], strict=True):
            assert ref.split("#")[0] == "S" + turn.split(":")[0][1:]  # the turn's session


@pytest.mark.skipif(not _locomo.available(), reason=f"{_locomo.FILE} is missing")
def test_the_locomo_fact_changes_are_measured(capsys: pytest.CaptureFixture[str]) -> None:
    result = bench.main(["--sets", "locomo-facts", "--pairs", "6", "--stores", "text"])
    rows = result["rows"]
    assert len(rows) == 6 and {r["set"] for r in rows} == {"locomo-facts"}
    assert all(r["scope"].endswith("/facts") for r in rows)  # apart from the turns' scopes
    assert "locomo-facts/text" in capsys.readouterr().out
