"""A vector holding an int too large for a float (``10**400``) is an InvalidArgumentError
naming the argument wherever a vector is given (a search's ``query_embedding``, an add's,
an update's or an import's ``embedding``), and stores nothing. On both backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.errors import InvalidArgumentError

HUGE = [10**400] + [1.0] * 31


def test_a_query_vector_too_large_for_a_float_is_refused(make_store: StoreFactory) -> None:
    mem = make_store("qvec", WordHashEmbedder())
    mem.add("tea note")
    for mode in ("vector", "hybrid"):
        with pytest.raises(InvalidArgumentError, match="query_embedding holds a number too large"):
            mem.search("tea", 3, query_embedding=HUGE, mode=mode)  # type: ignore[arg-type]
    # A float too large for float32 is infinite there, refused as such.
    with pytest.raises(InvalidArgumentError, match="non-finite"):
        mem.search("tea", 3, query_embedding=[-1e300] + [1.0] * 31)


def test_an_embedding_too_large_for_a_float_stores_nothing(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    mem = make_store("emb", WordHashEmbedder())
    kept = mem.add("tea note")
    too_large = "embedding holds a number too large for a float"
    with pytest.raises(InvalidArgumentError, match=too_large):
        mem.add("coffee", embedding=HUGE)
    with pytest.raises(InvalidArgumentError, match=too_large):
        mem.add_many([{"text": "ok"}, {"text": "coffee", "embedding": HUGE}])
    with pytest.raises(InvalidArgumentError, match=too_large):
        mem.update(kept.id, text="changed", embedding=HUGE)
    line = {**mem.get(kept.id).to_dict(embedding=False), "id": "new", "embedding": HUGE}
    (tmp_path / "in.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(InvalidArgumentError, match="too large for a float"):
        mem.import_jsonl(tmp_path / "in.jsonl")
    assert [r.text for r in mem.list()] == ["tea note"]
