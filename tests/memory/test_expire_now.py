"""``Memory.expire`` deletes every expired record at once, as the maintenance sweep
would (its history ending with ``"expire"``), and returns those of the table and scope
asked for, on both backends. The sweep is held off and the clock moved past the expiry,
so nothing but the call deletes them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import AsyncMemory
from memlane._memory.writer import Writer


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Seconds the store's clock runs ahead; maintenance's sweep (which passes no list
    for the rows it deletes) held off."""
    ahead = [0.0]
    real_time, real_expire = time.time, Writer.expire

    def expire(self: Writer, now: float, gone: list[Any] | None = None) -> int:
        return 0 if gone is None else real_expire(self, now, gone)

    monkeypatch.setattr(Writer, "expire", expire)
    monkeypatch.setattr(time, "time", lambda: real_time() + ahead[0])
    return ahead


def test_expire_deletes_every_expired_record_and_returns_the_scopes(
    make_store: StoreFactory, later: list[float]
) -> None:
    mem = make_store("expire-now")
    mine = mem.add("the door code is 1234", ttl=60, user_id="u")
    theirs = mem.add("the gate code is 99", ttl=60, user_id="v")
    elsewhere = mem.add("a note", ttl=60, table="notes", user_id="u")
    kept = mem.add("alice likes tea", user_id="u")
    assert mem.expire(user_id="u") == []
    later[0] = 120
    gone = mem.expire(user_id="u")
    assert [r.id for r in gone] == [mine.id]
    assert gone[0].text == "the door code is 1234"
    # The others expired went too: the call sweeps the store, as maintenance does.
    for rec in (mine, theirs, elsewhere):
        assert [(v.ended, v.ended_by) for v in mem.history(rec.id)] == [("delete", "expire")]
    assert mem.count(table=None) == 1 and kept.id in mem
    assert mem.expire(table=None) == []


def test_expire_is_on_async_memory(make_store: StoreFactory, later: list[float]) -> None:
    mem = make_store("expire-async")
    rec = mem.add("the door code is 1234", ttl=60, user_id="u")
    later[0] = 120
    gone = asyncio.run(AsyncMemory(memory=mem).expire(table=None))
    assert [r.id for r in gone] == [rec.id]
