"""``update(expires_at=...)`` checks the expiry as ``add`` does, on both backends: one
not in the future is refused (``InvalidArgumentError``) and changes nothing, where it
was stored and the record vanished from every read at once. ``ttl`` and a future
``expires_at`` still move it, keeping a version."""

from __future__ import annotations

import time

import pytest

from conftest import StoreFactory
from memlane import InvalidArgumentError


def test_update_refuses_an_expiry_in_the_past(make_store: StoreFactory) -> None:
    mem = make_store("update-expiry")
    rec = mem.add("the door code is 1234", user_id="u")
    past = time.time() - 3600
    with pytest.raises(InvalidArgumentError, match="is not in the future"):
        mem.add("a note", expires_at=past)
    with pytest.raises(InvalidArgumentError, match="is not in the future"):
        mem.update(rec.id, expires_at=past)
    with pytest.raises(InvalidArgumentError, match="is not in the future"):
        mem.update(rec, importance=0.9, expires_at=past)
    with pytest.raises(InvalidArgumentError, match="not both"):
        mem.update(rec.id, expires_at=time.time() + 60, ttl=60)
    with pytest.raises(InvalidArgumentError, match="ttl must be"):
        mem.update(rec.id, ttl=-1)
    assert mem.get(rec.id) == rec
    assert [v.event for v in mem.history(rec.id)] == ["add"]
    later = time.time() + 3600
    assert mem.update(rec.id, expires_at=later).expires_at == later
    moved = mem.update(rec.id, ttl=7200, importance=0.9)
    assert moved.expires_at not in (None, later)
    assert mem.get(rec.id).expires_at == moved.expires_at
    assert [v.record.expires_at for v in mem.history(rec.id)] == [None, later, moved.expires_at]
