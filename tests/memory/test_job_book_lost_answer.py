"""A job record's write whose commit reached the database but whose answer was lost (a
connection cut right after ``COMMIT``: PostgreSQL then says the write "may or may not
have been stored"). The book read such a write as unwritten, so a holder took its own
record for another process's: a lease renewed that way ended the job as "taken over"
(its facts unstored while the agent lived), and a plan saved that way was asked of the
model again and applied twice. The book now reads the record back after a failed write
and answers as the write did. Both backends."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import StorageError

LOST = "commit failed (if the connection was lost, the write may or may not have been stored)"


class Cut:
    """Makes the store's next ``n`` transactions raise after their commit, as a lost
    answer does; ``before`` makes them fail before it instead (nothing stored)."""

    def __init__(self, mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
        self.db = mem._sync.db  # type: ignore[attr-defined]
        self.after = 0
        self.before = 0
        self._lock = threading.Lock()
        real = self.db.transaction

        @contextlib.contextmanager
        def transaction() -> Iterator[Any]:
            with self._lock:
                fail_before, self.before = self.before > 0, max(self.before - 1, 0)
            with real() as conn:
                yield conn
                if fail_before:
                    raise StorageError("write failed, nothing was stored")
            with self._lock:
                lost, self.after = self.after > 0, max(self.after - 1, 0)
            if lost:
                raise StorageError(LOST)

        monkeypatch.setattr(self.db, "transaction", transaction)


@pytest.fixture
def mem(make_store: StoreFactory) -> Iterator[Memory]:
    m = make_store("jobs_lost", WordHashEmbedder())
    yield m
    m.close()


def test_a_write_stored_with_its_answer_lost_is_taken_as_written(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = Cut(mem, monkeypatch)
    jobs = mem.jobs
    cut.after = 1
    jobs.put("a", "v1")  # stored: no error
    assert jobs.items() == [("a", "v1")]
    cut.after = 1
    assert jobs.swap("a", "v1", "v2") is True
    assert jobs.swap("a", "v1", "v3") is False  # the holder's next write starts from v2
    jobs.put("b", "x")
    cut.after = 1
    assert jobs.swap("b", "x", "y", drop=("a", "v2")) is True  # one transaction: both
    assert jobs.items() == [("b", "y")]
    jobs.put("a", "v1")
    cut.after = 1
    assert jobs.swap("c", "x", "y", drop=("a", "v1")) is False  # no c (a dropped all the same)
    assert jobs.items() == [("b", "y")]
    cut.after = 1
    assert jobs.drop("b", "y") is True
    assert jobs.items() == []
    jobs.put("c", "z")
    cut.after = 1
    assert jobs.drop("c") is True
    assert jobs.items() == []


def test_a_write_that_stored_nothing_still_raises(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = Cut(mem, monkeypatch)
    jobs = mem.jobs
    jobs.put("a", "v1")
    for write in (
        lambda: jobs.put("a", "v2"),
        lambda: jobs.swap("a", "v1", "v2"),
        lambda: jobs.drop("a", "v1"),
        lambda: jobs.drop("a"),
    ):
        cut.before = 1
        with pytest.raises(StorageError, match="nothing was stored"):
            write()
        assert jobs.items() == [("a", "v1")]


def test_a_lost_answer_over_another_writers_record_is_not_ours(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read back, the record is neither what the write replaced nor what it made:
    another writer's (the conditional write found it so)."""
    cut = Cut(mem, monkeypatch)
    jobs = mem.jobs
    jobs.put("a", "theirs")
    cut.after = 1
    assert jobs.swap("a", "mine", "mine, renewed") is False
    cut.after = 1
    assert jobs.drop("a", "mine") is False
    assert jobs.items() == [("a", "theirs")]
    # A put's record read back as another's: the put is not taken as written.
    monkeypatch.setattr(cut.db, "tenant_meta_items", lambda prefix: [("job:b", "another's")])
    cut.after = 1
    with pytest.raises(StorageError, match="may or may not"):
        jobs.put("b", "v")


def test_a_record_that_cannot_be_read_back_leaves_the_error(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = Cut(mem, monkeypatch)
    jobs = mem.jobs
    jobs.put("a", "v1")

    def unreachable(prefix: str) -> Any:
        raise StorageError("the server stopped answering")

    monkeypatch.setattr(cut.db, "tenant_meta_items", unreachable)
    cut.after = 1
    with pytest.raises(StorageError, match="may or may not"):
        jobs.swap("a", "v1", "v2")


@pytest.mark.parametrize("last", ["\U0010ffff", "\ud7ff"], ids=["last", "before-surrogates"])
def test_keys_ending_in_the_edges_of_unicode(
    mem: Memory, monkeypatch: pytest.MonkeyPatch, last: str
) -> None:
    """A key's range ended one code point above its last: past U+10FFFF a raw
    ``ValueError``, and U+D800 a surrogate no database takes (``UnicodeEncodeError``),
    from ``mark`` and, read back after a failed write, from ``put``, ``swap``, ``drop``."""
    jobs = mem.jobs
    key = "job" + last
    jobs.put(key, "v1")
    jobs.put(key + last, "longer")
    jobs.set_mark(key, "m")
    assert jobs.mark(key) == "m"
    assert dict(jobs.items()) == {key: "v1", key + last: "longer"}
    cut = Cut(mem, monkeypatch)
    cut.after = 1
    assert jobs.swap(key, "v1", "v2") is True
    cut.after = 1
    assert jobs.drop(key, "v2") is True
    assert jobs.items() == [(key + last, "longer")]


def test_a_mark_taken_or_dropped_with_its_answer_lost(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``take_mark`` (a lease: added if none, or swapped from the one held) and
    ``drop_mark`` answer as their write did; of two takers one takes the mark."""
    cut = Cut(mem, monkeypatch)
    jobs = mem.jobs
    assert jobs.take_mark("lease", "me") is True
    assert jobs.take_mark("lease", "other") is False  # held
    assert jobs.take_mark("lease", "other", "not held") is False
    cut.after = 1
    assert jobs.take_mark("lease", "other", "me") is True  # stored, its answer lost
    assert jobs.mark("lease") == "other"
    cut.before = 1
    with pytest.raises(StorageError, match="nothing was stored"):
        jobs.drop_mark("lease", "other")
    assert jobs.drop_mark("lease", "me") is False  # not what it holds
    cut.after = 1
    assert jobs.drop_mark("lease", "other") is True
    assert jobs.mark("lease") is None
    cut.after = 1
    assert jobs.take_mark("lease", "me") is True
    assert jobs.mark("lease") == "me" and jobs.items() == []  # a mark is no job
