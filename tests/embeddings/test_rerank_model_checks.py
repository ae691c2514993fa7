"""CrossEncoder: a pair longer than ``max_length`` is cut longest first (a long question
leaves the memory its share), and a model whose output is not one logit per pair is an
EmbedderUnavailableError naming the output, at load when it declares its shape, else at
scoring. On the tiny ONNX cross-encoder test_rerank.py builds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_rerank import IDS, TEXTS, WEIGHT, WORDS, _write_cross_encoder

from conftest import StoreFactory, WordHashEmbedder
from memlane.embeddings import OnnxEmbedder
from memlane.embeddings.rerank import CrossEncoder
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError


def test_a_long_question_leaves_the_memory_its_share(tmp_path: Path) -> None:
    reranker = CrossEncoder(_write_cross_encoder(tmp_path / "ce"))  # max_length 512
    short = reranker.scores("when hiking", ["hiking trail", "garden"])
    assert short == [3.0, -1.0]
    # 521 question tokens: the memory, the shorter, stays whole; the question is cut.
    assert reranker.scores("when " * 520 + "hiking", ["hiking trail", "garden"]) == short


def test_pairs_are_cut_longest_first(tmp_path: Path) -> None:
    reranker = CrossEncoder(_write_cross_encoder(tmp_path / "ce"), max_length=11)  # 8 words
    cls, sep = IDS["[CLS]"], IDS["[SEP]"]
    hiking, when, trail = IDS["hiking"], IDS["when"], IDS["trail"]

    def pair(query: str, text: str) -> tuple[list[int], list[int]]:
        return reranker._pair(reranker._tokenizer.encode(query, True).ids, text)

    # Both fit: as they are.
    ids, types = pair("when hiking", "trail trail")
    assert ids == [cls, when, hiking, sep, trail, trail, sep]
    assert types == [0, 0, 0, 0, 1, 1, 1]
    # A long question, a short memory: the memory whole, the question keeps its end (the
    # query search_knowledge puts after the conversation).
    ids, types = pair("when " * 20 + "hiking", "trail trail")
    assert ids == [cls, *[when] * 5, hiking, sep, trail, trail, sep]
    assert types == [0] * 8 + [1] * 3
    # A short question, a long memory: the question whole, the memory keeps its start.
    ids, _ = pair("hiking", "hiking " + "trail " * 20)
    assert ids == [cls, hiking, sep, hiking, *[trail] * 6, sep]
    # Both long: half each, the memory the odd token (9 words of room at 12).
    wider = CrossEncoder(tmp_path / "ce" / "model.onnx", max_length=12)
    ids, types = wider._pair(wider._tokenizer.encode("when " * 20, True).ids, "trail " * 20)
    assert ids == [cls, *[when] * 4, sep, *[trail] * 5, sep]
    assert types == [0] * 6 + [1] * 6


def _model(folder: Path, reduce: str, shape: list[int | str] | None, extra: bool = False) -> Path:
    """A cross-encoder whose output is the memory's words' weights reduced by ``reduce``:
    ``"all"`` one number for the batch, ``"row"`` one per pair; ``extra`` adds an axis.
    ``shape`` is the output's declared shape (None: undeclared)."""
    from onnx import TensorProto, helper, numpy_helper, save

    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text(
        (_write_cross_encoder(folder / "base").parent / "tokenizer.json").read_text()
    )
    table = np.array([WEIGHT.get(w, 0.0) for w in WORDS], dtype=np.float32)
    gather = helper.make_node("Gather", ["table", "input_ids"], ["w"], axis=0)
    if reduce == "all":
        nodes = [gather, helper.make_node("ReduceSum", ["w"], ["logits"], keepdims=0)]
    else:
        out = "summed" if extra else "logits"
        nodes = [gather, helper.make_node("ReduceSum", ["w", "axis1"], [out], keepdims=1)]
        if extra:
            nodes.append(helper.make_node("Unsqueeze", ["summed", "axis2"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "odd-cross-encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, shape)],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


def test_an_output_of_one_number_per_batch_is_refused_at_scoring(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    reranker = CrossEncoder(_model(tmp_path / "scalar", "all", None))
    with pytest.raises(EmbedderUnavailableError, match=r"output 'logits' has shape \(\)"):
        reranker.scores("garden", ["garden rose", "hiking"])
    mem = make_store("odd-model", WordHashEmbedder())
    mem.add_many([{"text": t} for t in TEXTS])
    with pytest.raises(EmbedderUnavailableError, match="a logit per pair"):
        mem.search("garden", 3, rerank=reranker)
    assert not mem.count(filters={"access_count": {"$gt": 0}})


def test_an_output_declared_with_three_axes_is_refused_at_load(tmp_path: Path) -> None:
    model = _model(tmp_path / "three", "row", ["batch", 1, 1], extra=True)
    with pytest.raises(EmbedderUnavailableError, match=r"first output 'logits' .* shape"):
        CrossEncoder(model)
    # Declared as [batch] or [batch, 1], it loads and scores.
    assert CrossEncoder(_model(tmp_path / "row", "row", ["batch", 1])).scores(
        "x", ["hiking", "garden"]
    ) == [2.0, -1.0]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"model_path": 123}, "model_path must be a str or a path"),
        ({"model_path": b"model.onnx"}, "model_path must be a str or a path"),
        ({"tokenizer_path": 123}, "tokenizer_path must be a str or a path"),
        ({"threads": 2**31}, "threads must be between 1 and"),
        ({"threads": 2**70}, "threads must be between 1 and"),
    ],
)
def test_arguments_of_the_wrong_kind_are_refused_by_name(
    tmp_path: Path, arguments: dict[str, object], message: str
) -> None:
    # They reached pathlib or onnxruntime, whose TypeError the caller got.
    given: dict[str, object] = {"model_path": _write_cross_encoder(tmp_path / "ce"), **arguments}
    with pytest.raises(InvalidArgumentError, match=message):
        CrossEncoder(**given)  # type: ignore[arg-type]
    # The embedder takes the same arguments, checked the same way.
    if "threads" not in arguments:
        given.pop("threads", None)
    with pytest.raises(InvalidArgumentError, match=message):
        OnnxEmbedder(**given)  # type: ignore[arg-type]


def test_a_tokenizer_that_adds_no_special_tokens_is_refused(tmp_path: Path) -> None:
    # A pair takes its [CLS] and [SEP] from the question's encoding: without them, the
    # question's first and last words stood in for them, the last one after the memory.
    from tokenizers import Tokenizer, models, pre_tokenizers

    model = _write_cross_encoder(tmp_path / "ce")
    bare = Tokenizer(models.WordLevel(IDS, unk_token="[UNK]"))
    bare.pre_tokenizer = pre_tokenizers.Whitespace()
    bare.save(str(tmp_path / "bare.json"))
    with pytest.raises(EmbedderUnavailableError, match="adds 0 special tokens"):
        CrossEncoder(model, tmp_path / "bare.json")
    assert len(CrossEncoder(model).scores(TEXTS[0], TEXTS[:2])) == 2
