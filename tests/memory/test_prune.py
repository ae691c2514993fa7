"""Memory.prune: age, importance and access criteria; evergreen memories never pruned."""

from __future__ import annotations

import time

import pytest

from memlane import InvalidArgumentError, Memory

DAY = 86400.0


@pytest.fixture
def mem(word_embedder):
    m = Memory(None, word_embedder)
    yield m
    m.close()


def test_prune(mem):
    now = time.time()
    old = now - 40 * DAY
    stale = mem.add("old trivia about the weather", created_at=old, importance=0.2)
    important = mem.add("old but important: Alice's birthday", created_at=old, importance=0.9)
    used = mem.add("old but used: Alice's coffee order", created_at=old, importance=0.2)
    forever = mem.add("old evergreen: peanut allergy", created_at=old, evergreen=True, importance=0)
    fresh = mem.add("fresh trivia about the weather", importance=0.1)
    other_table = mem.add("old message", table="messages", created_at=old, importance=0.1)
    other_user = mem.add("bob's old trivia", created_at=old, importance=0.1, user_id="bob")
    for _ in range(3):
        assert mem.search("coffee", 1, mode="text")[0].record.id == used.id
    assert mem.get(used.id).access_count >= 3

    removed = mem.prune(
        max_age_days=30, keep_importance_at_least=0.8, keep_access_count_above=2, user_id=None
    )
    ids = {r.id for r in removed}
    assert stale.id in ids and other_user.id in ids
    for kept in (important, used, forever, fresh, other_table):
        assert kept.id in mem and kept.id not in ids
    assert all(r.id not in mem for r in removed)
    assert mem.prune(max_age_days=30, keep_importance_at_least=0.8, keep_access_count_above=2) == []
    assert {r.id for r in mem.prune(max_age_days=30, keep_importance_at_least=0.8)} == {used.id}

    # Scope narrows; table=None reaches every table; evergreen survives anything.
    mem.add("bob again", user_id="bob", created_at=old)
    assert [r.text for r in mem.prune(max_age_days=0, user_id="alice")] == []
    assert {r.text for r in mem.prune(max_age_days=0, table=None)} >= {"old message", "bob again"}
    assert forever.id in mem and len(mem) == 1


def test_prune_needs_a_criterion(mem):
    with pytest.raises(InvalidArgumentError, match="at least one"):
        mem.prune()
    with pytest.raises(InvalidArgumentError):
        mem.prune(max_age_days=-1)
    with pytest.raises(InvalidArgumentError):
        mem.prune(max_age_days=float("nan"))


def test_prune_pages(mem):
    old = time.time() - 10 * DAY
    mem.add_many([{"text": f"note {i}", "created_at": old} for i in range(1200)])
    assert len(mem.prune(max_age_days=1)) == 1200 and len(mem) == 0


def test_prune_deletes_in_one_transaction(make_store, word_embedder):
    """N prunable records go in one change (one commit), on both backends, and stay gone."""
    mem = make_store("prune", word_embedder)
    old = time.time() - 40 * DAY
    doomed = mem.add_many([{"text": f"old note {i}", "created_at": old} for i in range(25)])
    kept = mem.add("fresh note")
    for _ in range(2):  # pending access counts ride in that same transaction
        mem.search("old note", 5, mode="text")
    before = mem._db.seq()
    removed = mem.prune(max_age_days=30)
    assert mem._db.seq() == before + 1
    assert {r.id for r in removed} == {r.id for r in doomed}
    assert len(mem) == 1 and kept.id in mem
    mem.close()
    again = make_store("prune", word_embedder)
    try:
        assert len(again) == 1 and kept.id in again
        assert all(r.id not in again for r in doomed)
        assert again.search("old note", 5, mode="text")[0].record.id == kept.id
    finally:
        again.close()
