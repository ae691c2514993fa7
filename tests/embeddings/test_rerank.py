"""search(..., rerank=callable): the callable reorders the search's best hits, and the
first k it returns are the answer; on both backends."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError
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


# -- the ONNX cross-encoder, on a tiny model built here ---------------------------------

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hiking", "trail", "garden", "rose", "when"]
IDS = {w: i for i, w in enumerate(WORDS)}
# What each word of the memory (token type 1) adds to the logit.
WEIGHT = {"hiking": 2.0, "trail": 1.0, "garden": -1.0, "rose": 0.5}


def _write_cross_encoder(folder: Path) -> Path:
    """logit = sum over the memory's tokens (type 1, unmasked) of WEIGHT[word]: [batch, 1]."""
    from onnx import TensorProto, checker, helper, numpy_helper, save
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tokenizer = Tokenizer(models.WordLevel(IDS, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", IDS["[CLS]"]), ("[SEP]", IDS["[SEP]"])]
    )
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    table = np.array([WEIGHT.get(w, 0.0) for w in WORDS], dtype=np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["w"], axis=0),
        helper.make_node("Cast", ["token_type_ids"], ["tf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["w", "tf"], ["wt"]),
        helper.make_node("Mul", ["wt", "mf"], ["wm"]),
        helper.make_node("ReduceSum", ["wm", "axis1"], ["logits"], keepdims=1),
    ]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-cross-encoder",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    checker.check_model(model)
    save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


def test_the_cross_encoder_reranks_by_its_model(make_store: StoreFactory, tmp_path: Path) -> None:
    from memlane.embeddings.rerank import CrossEncoder

    reranker = CrossEncoder(_write_cross_encoder(tmp_path / "ce"), batch_size=2)
    # Only the memory's words count (the question's are token type 0), padding none.
    assert reranker.scores("hiking when", ["garden", "hiking trail", "rose rose", "x"]) == [
        -1.0,
        3.0,
        1.0,
        0.0,
    ]
    mem = make_store("cross", WordHashEmbedder())
    mem.add_many(
        [
            {"id": "a", "text": "garden garden rose"},
            {"id": "b", "text": "hiking trail"},
            {"id": "c", "text": "rose garden trail"},
            {"id": "d", "text": "hiking"},
        ]
    )
    hits = mem.search("garden rose trail hiking", 3, rerank=reranker, track_access=False)
    assert [h.record.id for h in hits] == ["b", "d", "c"]  # 3.0, 2.0, 0.5 (a: -1.5)


def test_a_missing_cross_encoder_is_refused(tmp_path: Path) -> None:
    from memlane.embeddings.rerank import CrossEncoder

    with pytest.raises(EmbedderUnavailableError, match="no cross-encoder model"):
        CrossEncoder(tmp_path / "none.onnx")
    model = _write_cross_encoder(tmp_path / "ce")
    (tmp_path / "ce" / "tokenizer.json").unlink()
    with pytest.raises(EmbedderUnavailableError, match=r"no tokenizer\.json"):
        CrossEncoder(model)
