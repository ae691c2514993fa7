"""A subscription that falls behind loses its OLDEST unread events, not the newest, and
reads one ``lost`` event in their place, ahead of what followed them, whether or not
anything is written after (docs/server.md, "Change events"). Before, a full queue
dropped the event arriving, and the ``lost`` event was queued only ahead of a later
event that fitted: a follower that fell behind in a burst got the burst's oldest
events, and no word that its newest were missed until some other write came."""

from __future__ import annotations

from typing import Any

from conftest import StoreFactory
from memlane import Memory
from memlane._memory.events import Event, Subscription


class Hub:
    """What a subscription asks of its ``Events``: to be dropped at its close."""

    def __init__(self) -> None:
        self.dropped: list[Subscription] = []

    def drop(self, sub: Subscription) -> None:
        self.dropped.append(sub)


def sub_of(max_queue: int) -> Subscription:
    return Subscription(Hub(), {}, max_queue)  # type: ignore[arg-type]


def add(n: int) -> Event:
    return {"type": "add", "id": f"r{n}", "record": {"text": f"note {n}"}}


def drain(sub: Subscription) -> list[Any]:
    out: list[Any] = []
    while (event := sub.get(timeout=0)) is not None:
        out.append(event["count"] if event["type"] == "lost" else event["id"])
    return out


def test_a_full_queue_drops_its_oldest_and_says_so_first() -> None:
    sub = sub_of(3)
    for n in range(10):
        sub.offer(add(n))
    assert sub.lost == 7
    # Nothing written after the burst: the lost event is there all the same.
    assert drain(sub) == [7, "r7", "r8", "r9"]
    sub.offer(add(10))
    assert drain(sub) == ["r10"]  # told once
    assert sub.lost == 7


def test_a_loss_while_reading_is_told_before_what_follows_it() -> None:
    sub = sub_of(2)
    for n in range(3):
        sub.offer(add(n))
    assert sub.get(timeout=0) == {"type": "lost", "count": 1}
    for n in range(3, 6):
        sub.offer(add(n))  # r1 and r2, queued still, go first, then r3
    assert drain(sub) == [3, "r4", "r5"]
    assert sub.lost == 4


def test_a_queue_of_one_keeps_the_newest() -> None:
    sub = sub_of(1)
    for n in range(5):
        sub.offer(add(n))
    assert drain(sub) == [4, "r4"]


def test_changes_that_could_not_be_read_are_told_in_their_place() -> None:
    """``missed``: another process's changes that could not be read come after what is
    queued and before what follows; a loss next to one is told as one count."""
    sub = sub_of(10)
    sub.offer(add(1))
    sub.missed(2)
    sub.missed(3)
    sub.offer(add(2))
    assert drain(sub) == ["r1", 5, "r2"]
    assert sub.lost == 5
    small = sub_of(2)
    small.offer(add(1))
    small.missed(4)
    small.offer(add(2))  # pushes out r1: its loss and the 4 missed are one lost event
    assert drain(small) == [5, "r2"]
    assert small.lost == 5


def test_a_reader_is_woken_when_events_come_to_an_empty_queue_and_at_close() -> None:
    sub = sub_of(2)
    sub.offer(add(0))
    wakes: list[int] = []
    sub.on_ready(lambda: wakes.append(1))
    assert wakes == [1]  # queued already: at once
    sub.offer(add(1))
    sub.offer(add(2))  # not empty: the reader, woken, reads until it is
    assert wakes == [1]
    assert drain(sub) == [1, "r1", "r2"]
    sub.offer(add(3))
    assert wakes == [1, 1]
    drain(sub)
    sub.missed(1)
    assert wakes == [1, 1, 1]
    drain(sub)
    sub.close()
    assert wakes == [1, 1, 1, 1] and sub.get() is None


def test_a_wake_up_that_raises_fails_no_write() -> None:
    sub = sub_of(2)

    def broken() -> None:
        raise RuntimeError("the reader's loop is gone")

    sub.on_ready(broken)
    sub.offer(add(0))
    assert drain(sub) == ["r0"]


def test_a_store_s_subscriber_that_fell_behind_gets_the_newest(make_store: StoreFactory) -> None:
    mem: Memory = make_store("lost_newest")
    with mem.events.subscribe(max_queue=2) as sub:
        mem.add_many([{"text": f"note {i}"} for i in range(6)])
        assert sub.lost == 4
        first = sub.get(timeout=0)
        assert first == {"type": "lost", "count": 4}
        texts = [e["record"]["text"] for e in iter(lambda: sub.get(timeout=0), None)]
        assert texts == ["note 4", "note 5"]
