"""An expired record is invisible to every read from the instant it expires, before
maintenance removes it (issue 47), on both backends: exact and near duplicates and
the dedup window ignore it (so ``add(unique=True)`` of its text stores a new record),
and ``in``, ``len``, ``count``, ``export_jsonl``, ``history`` and the session
neighbours' ``bm25_context`` leave it out. Maintenance's sweep is held off while a
test looks at that window, then let run: it still removes what expired.

Expiry is the wall clock passing a record's ``expires_at``, set a moment ahead; the
tests wait for the clock to pass it, not for a length of time."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory, UnknownIdError
from memlane._memory.writer import Writer


class Sweep:
    """Holds maintenance's removal of expired records off; :meth:`run` runs it once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._expire = Writer.expire
        monkeypatch.setattr(Writer, "expire", lambda self, now: 0)

    def run(self, mem: Memory) -> int:
        """Removes what expired, as maintenance does; returns how many records went."""
        return self._expire(mem._writer, time.time())


@pytest.fixture
def sweep(monkeypatch: pytest.MonkeyPatch) -> Sweep:
    return Sweep(monkeypatch)


def soon() -> float:
    """An expiry a moment ahead: far enough for the add to take it, near enough to wait."""
    return time.time() + 0.3


def wait_past(at: float | None) -> None:
    """Returns once the clock the store reads is past ``at``."""
    assert at is not None
    while time.time() <= at:
        time.sleep(0.01)


def context_of(mem: Memory, query: str, record_id: str) -> float | None:
    hits = mem.search(query, 10, explain=True)
    found = [h.explain for h in hits if h.record.id == record_id]
    assert found and found[0] is not None
    value = found[0]["bm25_context"]
    return None if value is None else float(value)


def test_unique_add_of_an_expired_records_text_stores_a_new_record(
    make_store: StoreFactory, sweep: Sweep
) -> None:
    mem = make_store("exact", WordHashEmbedder())
    old = mem.add("the door code is 1234", user_id="u", expires_at=soon())
    text_only = make_store("text", None)
    plain = text_only.add("the gate code is 9", user_id="u", expires_at=soon())
    wait_past(max(old.expires_at or 0, plain.expires_at or 0))
    for store, text, gone in [
        (mem, "the door code is 1234", old.id),
        (text_only, "the gate code is 9", plain.id),
    ]:
        new = store.add(text, user_id="u", unique=True)
        assert (new.duplicate, new.duplicate_of) == (None, None)
        assert new.id != gone
        assert store.get(new.id).text == text
        assert [h.record.id for h in store.search(text, 5, user_id="u")] == [new.id]
        # The new record is the one a later unique add of the text finds.
        again = store.add(text, user_id="u", unique=True)
        assert (again.id, again.duplicate) == (new.id, "exact")
    assert sweep.run(mem) == 1
    assert [v.ended_by for v in mem.history(old.id)] == ["expire"]
    assert mem.count(user_id="u") == 1
    assert sweep.run(text_only) == 1


@pytest.mark.parametrize("near_duplicate", ["mark", "skip"])
def test_near_duplicates_ignore_expired_records(
    make_store: StoreFactory, sweep: Sweep, near_duplicate: str
) -> None:
    mem = make_store("near", WordHashEmbedder(), near_duplicate=near_duplicate)
    live = mem.add("Alice likes green tea", user_id="u")
    old = mem.add("the door code is 1234", user_id="u", expires_at=soon())
    # The same words (the same vector here), another text: a near-duplicate of each.
    assert mem.add("alice LIKES green tea!", user_id="u", unique=True).duplicate == "near"
    wait_past(old.expires_at)
    new = mem.add("The door code is 1234.", user_id="u", unique=True)
    assert (new.duplicate, new.duplicate_of) == (None, None)
    assert mem.get(new.id).text == "The door code is 1234."
    assert live.id in mem


def test_the_dedup_window_ignores_an_expired_record(make_store: StoreFactory, sweep: Sweep) -> None:
    mem = make_store("window", WordHashEmbedder())
    meta = {"messageId": "m-7"}
    old = mem.add("Alice: see you at 6", user_id="u", metadata=meta, expires_at=soon())
    live = mem.add("Bob: on my way", user_id="u", metadata={"messageId": "m-8"})
    wait_past(old.expires_at)
    assert mem.add("Bob: on my way", user_id="u", metadata={"messageId": "m-8"}).duplicate_of == (
        live.id
    )
    again = mem.add("Alice: see you at 6", user_id="u", metadata=meta)
    assert again.duplicate is None and again.id != old.id
    assert mem.get(again.id).metadata == meta


class ExpiringMeanwhile(WordHashEmbedder):
    """Embeds a text containing ``slow`` only once the clock passed ``until``: the
    duplicate of an add expires while the add runs."""

    def __init__(self) -> None:
        super().__init__()
        self.until: float | None = None
        self.slow = "\x00"

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if any(self.slow in t for t in texts) and self.until is not None:
            wait_past(self.until)
        return super().embed_batch(texts)


def test_a_unique_add_whose_duplicate_expires_meanwhile_is_stored(
    make_store: StoreFactory, sweep: Sweep
) -> None:
    embedder = ExpiringMeanwhile()
    mem = make_store("meanwhile", embedder, near_duplicate="skip")
    old = mem.add("the door code is 1234", user_id="u", expires_at=time.time() + 1.0)
    embedder.until, embedder.slow = old.expires_at, "Door"
    new = mem.add("Door code is 1234, the", user_id="u", unique=True)
    assert (new.duplicate, new.duplicate_of) == (None, None)
    assert mem.get(new.id).text == "Door code is 1234, the"


def test_in_len_count_export_and_history_leave_an_expired_record_out(
    make_store: StoreFactory, sweep: Sweep, tmp_path: Path
) -> None:
    mem = make_store("reads", WordHashEmbedder())
    keep = mem.add("the door is red", user_id="u")
    old = mem.add("the door code is 1234", user_id="u")
    changed = mem.update(old.id, text="the door code is 4321", by="alice", expires_at=soon())
    wait_past(changed.expires_at)
    assert old.id not in mem and keep.id in mem
    assert (len(mem), mem.count(), mem.count(user_id="u")) == (1, 1, 1)
    with pytest.raises(UnknownIdError):
        mem.get(old.id)
    # Its versions end where it expired, as the sweep will say.
    versions = mem.history(old.id)
    assert [(v.record.text, v.ended, v.ended_by) for v in versions] == [
        ("the door code is 1234", "update", "alice"),
        (changed.text, "delete", "expire"),
    ]
    assert versions[-1].ended_at == changed.expires_at
    out = tmp_path / "out.jsonl"
    assert mem.export_jsonl(out) == 1
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [x["id"] for x in lines if "history" not in x] == [keep.id]
    # Its history goes with it, its last version ended by the expiry.
    ended = [(x["history"]["text"], x["history"]["event"]) for x in lines if "history" in x]
    assert ended == [("the door code is 1234", "update"), (changed.text, "delete")]
    copy = make_store("copy", WordHashEmbedder())
    assert copy.import_jsonl(out) == 1
    assert old.id not in copy
    assert [(v.ended, v.ended_by) for v in copy.history(old.id)] == [
        ("update", "alice"),
        ("delete", "expire"),
    ]
    assert sweep.run(mem) == 1
    assert [(v.ended, v.ended_by) for v in mem.history(old.id)] == [
        ("update", "alice"),
        ("delete", "expire"),
    ]
    assert (len(mem), mem.count()) == (1, 1)


def test_an_expired_turn_lends_its_session_neighbour_no_words(
    make_store: StoreFactory, sweep: Sweep
) -> None:
    mem = make_store("context", WordHashEmbedder())
    # Two sessions alike but for the question's expiry; the answers hold no query word.
    asked = mem.add("what is the door code", session_id="a", expires_at=soon())
    answer = mem.add("it is 1234", session_id="a")
    mem.add("what is the door code", session_id="b")
    kept = mem.add("it is 1234", session_id="b")
    # A turn before the expired one lends its words past it, as once it is removed.
    first = mem.add("the garage door code", session_id="c")
    middle = mem.add("hold on", session_id="c", expires_at=soon())
    last = mem.add("fine", session_id="c")
    wait_past(max(asked.expires_at or 0, middle.expires_at or 0))
    query = "door code"
    assert context_of(mem, query, kept.id) > 0  # type: ignore[operator]
    assert context_of(mem, query, answer.id) == 0
    through = context_of(mem, query, last.id)
    assert through is not None and through > 0
    assert sweep.run(mem) == 2
    assert context_of(mem, query, answer.id) == 0
    after = context_of(mem, query, last.id)
    assert after is not None and after > 0
    assert first.id in mem
