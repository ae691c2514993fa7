"""search(..., rerank=callable): the callable reorders the search's best hits, and the
first k it returns are the answer; on both backends."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.errors import InvalidArgumentError
from memlane.records import SearchHit

TEXTS = [f"the garden {w} grows near the house" for w in "abcdefghijklmnopqrstuvwxyz"]


def _store(make_store: StoreFactory):  # type: ignore[no-untyped-def]
    mem = make_store("rerank", WordHashEmbedder())
    mem.add_many([{"id": f"m{i}", "text": t} for i, t in enumerate(TEXTS)])
    return mem


def test_the_reranker_orders_the_best_hits_and_k_of_them_are_returned(
    make_store: StoreFactory,
) -> None:
    mem = _store(make_store)
    seen: list[tuple[str, int]] = []

    def by_id_descending(query: str, hits: list[SearchHit]) -> Sequence[SearchHit]:
        seen.append((query, len(hits)))
        return sorted(hits, key=lambda h: int(h.record.id[1:]), reverse=True)

    plain = mem.search("garden house", 20, track_access=False)
    hits = mem.search("garden house", 3, rerank=by_id_descending, track_access=False)
    # It was handed the best 20 (max(k, 20)), as the search without it ranks them.
    assert seen == [("garden house", 20)]
    want = sorted((h.record.id for h in plain), key=lambda i: int(i[1:]), reverse=True)[:3]
    assert [h.record.id for h in hits] == want
    # A deeper k hands it k hits.
    mem.search("garden house", 25, rerank=by_id_descending, track_access=False)
    assert seen[-1] == ("garden house", 25)
    # It may keep fewer.
    kept = mem.search("garden house", 5, rerank=lambda q, h: h[:1], track_access=False)
    assert [h.record.id for h in kept] == [plain[0].record.id]


@pytest.mark.parametrize(
    ("rerank", "message"),
    [
        ("not callable", "rerank must be a callable"),
        (lambda q, hits: hits + hits[:1], "each at most once"),
        (lambda q, hits: [*hits[:2], "m0"], "rerank must return hits it was given"),
    ],
)
def test_a_bad_reranker_is_refused(make_store: StoreFactory, rerank: object, message: str) -> None:
    mem = _store(make_store)
    with pytest.raises(InvalidArgumentError, match=message):
        mem.search("garden", 3, rerank=rerank)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="k must be an int >= 1"):
        mem.search("garden", 0, rerank=lambda q, hits: hits)
