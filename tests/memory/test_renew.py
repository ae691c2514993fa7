"""``Memory.renew`` moves records' expiry in one transaction without keeping a version
(LangGraph's TTL refreshed at every read): the store does not grow with the reads, a
record read before stays that version, and the new expiry is what every read and every
process sees. Both backends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import AsyncMemory, InvalidArgumentError, UnknownIdError

SCOPE = {"user_id": "u"}


def test_renew_moves_the_expiry_and_keeps_no_version(make_store: StoreFactory) -> None:
    mem = make_store("renew", WordHashEmbedder())
    a = mem.add("the door code is 1234", ttl=3600, **SCOPE)
    b = mem.add("the wifi password is hunter2", ttl=3600, **SCOPE)
    keep = mem.add("the door is red", **SCOPE)
    at = time.time() + 7200
    for _ in range(50):
        assert mem.renew([a.id, b.id, "no-such-id", a.id], expires_at=at) == 2
    for rec in (a, b):
        now = mem.get(rec.id)
        assert now.expires_at == at
        assert now.updated_at == rec.updated_at
        assert [v.event for v in mem.history(rec.id)] == ["add"]
    assert mem.get(keep.id).expires_at is None
    # A record read before the renewal is still the version read.
    mem.update(a, text="the door code is 5678")
    assert mem.renew([b.id]) == 1  # neither given: it never expires
    assert mem.get(b.id).expires_at is None


def test_what_renew_sets_is_what_every_read_sees(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_store("renew-reads", WordHashEmbedder())
    a = mem.add("the door code is 1234", ttl=3600, **SCOPE)
    b = mem.add("the door code of the shed is 99", ttl=3600, **SCOPE)
    start = time.time()
    assert mem.renew([a.id], ttl=60) == 1
    later = start + 600  # past a's renewed expiry, before b's
    monkeypatch.setattr(time, "time", lambda: later)
    with pytest.raises(UnknownIdError):
        mem.get(a.id)
    assert [h.record.id for h in mem.search("door code", **SCOPE)] == [b.id]
    assert mem.count(**SCOPE) == 1
    assert mem.renew([a.id, b.id], ttl=60) == 1  # an expired record is not brought back
    assert mem.get(b.id).expires_at == pytest.approx(later + 60)


def test_renew_is_durable_and_followed(make_store: StoreFactory) -> None:
    mem = make_store("renew-durable", WordHashEmbedder())
    a = mem.add("the door code is 1234", ttl=3600, **SCOPE)
    at = time.time() + 7200
    mem.renew([a.id], expires_at=at)
    if make_store.backend == "postgres":
        # A second store on the database, with an engine of its own: another process's view.
        other = make_store(
            "renew-durable", WordHashEmbedder(), cache_dir=make_store.tmp_path / "other"
        )
    else:
        mem.close()
        other = make_store("renew-durable", WordHashEmbedder())
    assert other.get(a.id).expires_at == at
    assert [h.record.id for h in other.search("door code", **SCOPE)] == [a.id]


@pytest.mark.parametrize(
    ("ids", "kwargs", "match"),
    [
        ("abc", {"ttl": 60}, "ids must be a list"),
        ([1], {"ttl": 60}, r"ids\[0\]"),
        (["x"], {"ttl": 0}, "ttl must be"),
        (["x"], {"ttl": 60, "expires_at": time.time() + 99}, "not both"),
        (["x"], {"expires_at": 1.0}, "not in the future"),
    ],
)
def test_bad_renewals_are_refused_and_change_nothing(
    make_store: StoreFactory, ids: object, kwargs: dict[str, float], match: str
) -> None:
    mem = make_store("renew-bad", WordHashEmbedder())
    rec = mem.add("the door code is 1234", id="x", ttl=3600, **SCOPE)
    with pytest.raises(InvalidArgumentError, match=match):
        mem.renew(ids, **kwargs)  # type: ignore[arg-type]
    assert mem.get("x").expires_at == rec.expires_at


def test_async_memory_renews(tmp_path: Path) -> None:
    async def main() -> None:
        mem = await AsyncMemory.open(tmp_path / "s", WordHashEmbedder())
        rec = await mem.add("the door code is 1234", ttl=3600)
        assert await mem.renew([rec.id], ttl=7200) == 1
        await mem.close()

    asyncio.run(main())


def test_renew_leaves_superseded_versions_alone(make_store: StoreFactory) -> None:
    """A superseded version is history: renew does not count it, nor change it, as update
    and supersede do not (list returns it, so a renew of what list gave may name it)."""
    mem = make_store("renew-history", WordHashEmbedder())
    old = mem.add("Bob likes tea", ttl=3600, **SCOPE)
    new = mem.supersede(old.id, "Bob likes coffee")
    closed = mem.get(old.id)
    assert mem.renew([old.id, new.id], ttl=7200) == 1
    assert mem.get(old.id).expires_at == closed.expires_at


def test_renew_takes_its_change_number_before_its_rows(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As every writer does: on PostgreSQL a writer that locked its rows first and then
    waited for the change number deadlocked with an update of one of them."""
    mem = make_store("renew-order", WordHashEmbedder())
    rec = mem.add("the door code is 1234", ttl=3600, **SCOPE)
    db = mem._db
    order: list[str] = []
    for name in ("next_seq", "rows_for_write"):
        real = getattr(db, name)

        def traced(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            order.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(db, name, traced)
    assert mem.renew([rec.id], ttl=60) == 1
    assert order == ["next_seq", "rows_for_write"]
    assert mem.renew(["no-such-id"], ttl=60) == 0


def test_a_record_given_is_renewed_only_while_it_is_the_version_read(
    make_store: StoreFactory,
) -> None:
    """An expiry worked out from a record read (LangGraph's TTL) never lands on a rewrite
    made since: that record is left out, the others renewed."""
    mem = make_store("renew-as-read", WordHashEmbedder())
    a = mem.add("the door code is 1234", ttl=3600, **SCOPE)
    b = mem.add("the shed code is 99", ttl=3600, **SCOPE)
    read = [mem.get(a.id), mem.get(b.id)]
    mem.update(a.id, text="the door code is 5678", ttl=60)
    at = time.time() + 7200
    assert mem.renew(read, expires_at=at) == 1
    assert mem.get(a.id).expires_at != at and mem.get(b.id).expires_at == at
    assert mem.renew([mem.get(a.id), b.id], expires_at=at) == 2
    with pytest.raises(InvalidArgumentError, match="two versions"):
        mem.renew([read[0], mem.get(a.id)], ttl=60)
