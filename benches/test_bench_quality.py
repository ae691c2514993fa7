"""``bench_quality.py`` on a slice of LoCoMo's train half (one conversation, eight
questions of each category, both storage shapes), run once by CI's ``pytest benches``
so that the benchmark cannot rot. Skipped where ``../shared/data/locomo`` is absent."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

import _locomo

pytestmark = pytest.mark.skipif(
    not _locomo.available(), reason=f"LoCoMo's train half is not at {_locomo.FILE}"
)


@pytest.mark.parametrize("plain", [False, True], ids=["store", "plain"])
def test_locomo_runs_in_both_shapes(plain: bool, capsys: pytest.CaptureFixture[str]) -> None:
    from bench_ingest import CachedModel, VectorCache
    from bench_quality import CONFIGS, Bench, locomo_set
    from memlane import OnnxEmbedder

    qs = locomo_set("train", plain=plain, conversations=1)
    # The first eight questions of each category.
    qs = dataclasses.replace(
        qs,
        queries=[
            q
            for c in _locomo.CATEGORIES.values()
            for q in [q for q in qs.queries if q.category == c][:8]
        ],
    )
    assert qs.k == _locomo.K == 20
    embedder = OnnxEmbedder()
    bench = Bench(qs, CachedModel(embedder, VectorCache(embedder.name, embedder.dimension)))
    try:
        stored = bench.mem.get(qs.docs[0].id)
        assert stored is not None and stored.table == "messages"
        assert stored.metadata == {"dia_id": qs.docs[0].dia_id}
        assert (stored.speaker is None) == plain and (stored.session_id is None) == plain
        figures = {label: bench.run(options, label) for label, options in CONFIGS}
        if importlib.util.find_spec("bm25s") and importlib.util.find_spec("Stemmer"):
            figures.update(bench.peers())
        for label, (r5, r10, ndcg, r20) in figures.items():
            assert 0.0 <= r5 <= r10 <= r20 <= 1.0 and 0.0 <= ndcg <= 1.0, label
        # The evidence is found: the ids searched are the ids the questions name.
        assert figures["BM25 alone (text)"][3] > 0.3
        bench.by_category()
    finally:
        bench.mem.close()
    out = capsys.readouterr().out
    for category in _locomo.CATEGORIES.values():
        assert category in out
