"""A local ONNX model whose output is NaN or infinite: OnnxEmbedder fails
(``EmbedderUnavailableError`` naming the model) instead of handing the values on, so a
store neither blames the caller nor caches them; a cross-encoder whose logits are NaN
fails instead of ordering the hits at random."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, checker, helper, numpy_helper, save

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.embeddings import OnnxEmbedder, default_tokenizer_path
from memlane.embeddings.rerank import CrossEncoder
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError

DIM = 4


def _save(
    nodes: list[Any], inputs: list[Any], output: Any, initializers: list[Any], path: Path
) -> Path:
    graph = helper.make_graph(nodes, "broken", inputs, [output], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))
    shutil.copy(default_tokenizer_path(), path.parent / "tokenizer.json")
    return path


def broken_embedder(path: Path, result: str) -> Path:
    """Token states of ``x / (x - x)`` (x the token id on every axis: infinity) or
    ``(x - x) / (x - x)`` (NaN), [batch, tokens, DIM]."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])
    out = helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", DIM]
    )
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axis"], ["u"]),
        helper.make_node("Mul", ["u", "ones"], ["x"]),
        helper.make_node("Sub", ["x", "x"], ["zero"]),
        helper.make_node(
            "Div", ["zero" if result == "nan" else "x", "zero"], ["last_hidden_state"]
        ),
    ]
    initializers = [
        numpy_helper.from_array(np.ones(DIM, dtype=np.float32), "ones"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis"),
    ]
    return _save(nodes, [ids], out, initializers, path)


def nan_cross_encoder(path: Path) -> Path:
    """One logit a pair, ``(s - s) / (s - s)`` for s the sum of its ids: NaN."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch"])
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["f", "axis"], ["s"], keepdims=0),
        helper.make_node("Sub", ["s", "s"], ["zero"]),
        helper.make_node("Div", ["zero", "zero"], ["logits"]),
    ]
    initializers = [numpy_helper.from_array(np.array([1], dtype=np.int64), "axis")]
    return _save(nodes, [ids], out, initializers, path)


@pytest.mark.parametrize("result", ["nan", "inf"])
def test_an_embedder_model_giving_non_finite_values_fails(tmp_path: Path, result: str) -> None:
    model = broken_embedder(tmp_path / result / "model.onnx", result)
    embedder = OnnxEmbedder(model)
    failure = rf"{model}.* non-finite value"
    with pytest.raises(EmbedderUnavailableError, match=failure):
        embedder.embed("hello world")
    with pytest.raises(EmbedderUnavailableError, match=failure):
        embedder.embed_batch(["hello", "world again"])
    with Memory(tmp_path / "store", embedder=embedder) as mem:
        with pytest.raises(EmbedderUnavailableError, match=failure):
            mem.add("hello world")
        assert len(mem) == 0


def test_a_cross_encoder_giving_nan_logits_fails(tmp_path: Path) -> None:
    model = nan_cross_encoder(tmp_path / "rerank" / "model.onnx")
    reranker = CrossEncoder(model)
    failure = rf"{model} gave a non-finite relevance logit"
    with pytest.raises(EmbedderUnavailableError, match=failure):
        reranker.scores("q", ["a", "b", "c"])
    with Memory(tmp_path / "store", embedder=WordHashEmbedder()) as mem:
        mem.add_many([{"text": t} for t in ("a garden", "a trail", "a rose")])
        with pytest.raises(EmbedderUnavailableError, match=failure):
            mem.search("garden", 2, rerank=reranker)


def rows_embedder(path: Path, rows: str) -> Path:
    """Token states of the ids on every axis, but one row for the whole batch (their
    mean: ``collapsed``) or two rows a text (``doubled``)."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "t", DIM])
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axis"], ["u"]),
        helper.make_node("Mul", ["u", "ones"], ["x"]),
        helper.make_node("ReduceMean", ["x", "first"], ["last_hidden_state"], keepdims=1)
        if rows == "collapsed"
        else helper.make_node("Concat", ["x", "x"], ["last_hidden_state"], axis=0),
    ]
    initializers = [
        numpy_helper.from_array(np.ones(DIM, dtype=np.float32), "ones"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "first"),
    ]
    return _save(nodes, [ids], out, initializers, path)


@pytest.mark.parametrize("rows", ["collapsed", "doubled"])
def test_an_embedder_model_giving_other_rows_than_texts_fails(tmp_path: Path, rows: str) -> None:
    # One row for the batch was broadcast to every text (each given the same vector, no
    # error); two rows a text raised numpy's ValueError.
    model = rows_embedder(tmp_path / rows / "model.onnx", rows)
    embedder = OnnxEmbedder(model)
    with pytest.raises(EmbedderUnavailableError, match=rf"{model.name}.* output of shape"):
        embedder.embed_batch(["one two", "three four", "five six"])
    if rows == "doubled":
        with pytest.raises(EmbedderUnavailableError, match="output of shape"):
            embedder.embed("one two")


def test_an_embedder_model_giving_vectors_of_no_values_is_refused(tmp_path: Path) -> None:
    # It was taken with dimension 0, and a store refused it later without naming it.
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "t", "d"])
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axis"], ["x"]),
        helper.make_node("Slice", ["x", "zero", "zero", "axis"], ["last_hidden_state"]),
    ]
    initializers = [
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
    ]
    model = _save(nodes, [ids], out, initializers, tmp_path / "empty" / "model.onnx")
    with pytest.raises(EmbedderUnavailableError, match=rf"{model.name} gives vectors of 0 values"):
        OnnxEmbedder(model)


@pytest.mark.parametrize("texts", ["hello world", b"hello", 5, ["a", 1]])
def test_count_tokens_takes_a_sequence_of_str(texts: Any) -> None:
    # A str was counted character by character; an int raised a bare TypeError.
    with pytest.raises(InvalidArgumentError, match="count_tokens takes a sequence of str"):
        OnnxEmbedder().count_tokens(texts)
    assert OnnxEmbedder().count_tokens(["hello world", ""]) == [4, 2]
