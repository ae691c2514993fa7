"""OnnxEmbedder with any local sentence-embedding model: tiny ONNX graphs and WordLevel
tokenizers built here (no download), against the vectors numpy computes from the same
weights."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, pre_tokenizers, processors

import memlane
from memlane.embeddings import OnnxEmbedder, _model_files
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError

WORDS = ["[PAD]", "[UNK]", "[CLS]", "red", "blue", "green", "cat", "dog", "house", "tree"]
IDS = {w: i for i, w in enumerate(WORDS)}
DIM = 8
TABLE = np.random.default_rng(7).standard_normal((len(WORDS), DIM)).astype(np.float32)


def write_tokenizer(path: Path, *, cls: bool = False, pad: bool = False) -> Path:
    tokenizer = Tokenizer(models.WordLevel(IDS, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    if cls:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A", special_tokens=[("[CLS]", IDS["[CLS]"])]
        )
    if pad:  # saved with padding on, as many tokenizer.json files are
        tokenizer.enable_padding(pad_id=IDS["[PAD]"], pad_token="[PAD]", length=32)
    tokenizer.save(str(path))
    return path


def write_model(
    path: Path,
    *,
    pooled: bool = False,
    declared_dim: bool = True,
    output: str = "last_hidden_state",
    inputs: Sequence[tuple[str, int]] = (("input_ids", TensorProto.INT64),),
) -> Path:
    """token ids -> rows of TABLE ([batch, tokens, DIM]), or their plain mean over the
    tokens ([batch, DIM]) when ``pooled``; extra inputs are declared and unused."""
    ids = "input_ids"
    nodes = []
    if inputs[0][1] != TensorProto.INT64:
        nodes.append(helper.make_node("Cast", ["input_ids"], ["ids64"], to=TensorProto.INT64))
        ids = "ids64"
    states = "states" if pooled else output
    nodes.append(helper.make_node("Gather", ["table", ids], [states], axis=0))
    if pooled:
        nodes.append(helper.make_node("ReduceMean", [states, "axis1"], [output], keepdims=0))
    last: int | str = DIM if declared_dim else "dim"
    shape: list[int | str] = ["batch", last] if pooled else ["batch", "tokens", last]
    graph_inputs = [helper.make_tensor_value_info(n, t, ["batch", "tokens"]) for n, t in inputs]
    if not declared_dim:
        # An initializer that is also an input may be overridden at run time, so
        # onnxruntime cannot infer the output's last axis from it.
        graph_inputs.append(helper.make_tensor_value_info("table", TensorProto.FLOAT, ["v", "d"]))
    initializers = [numpy_helper.from_array(TABLE, "table")]
    if pooled:
        initializers.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"))
    graph = helper.make_graph(
        nodes,
        "tiny-embedder",
        graph_inputs,
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def unit(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = v / np.linalg.norm(v, axis=-1, keepdims=True)
    return out


def mean_of(text: str) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = TABLE[[IDS[w] for w in text.split()]].mean(axis=0)
    return out


TEXTS = ["red cat", "blue", "dog dog green house", "tree red", "cat"]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-model"
    write_model(folder / "model.onnx")
    write_tokenizer(folder / "tokenizer.json")
    return folder


def test_mean_pooling_matches_numpy(model_dir: Path) -> None:
    emb = OnnxEmbedder(model_dir / "model.onnx")
    assert emb.dimension == DIM
    assert emb.pooling == "mean"
    expected = np.stack([unit(mean_of(t)) for t in TEXTS])
    # Texts of different lengths share padded batches: padding must not leak in.
    np.testing.assert_allclose(emb.embed_batch(TEXTS), expected, atol=1e-6)
    np.testing.assert_allclose(emb.embed("dog dog green house"), expected[2], atol=1e-6)
    assert emb.embed("red").dtype == np.float32


def test_name_follows_the_file_content(model_dir: Path, tmp_path: Path) -> None:
    emb = OnnxEmbedder(model_dir / "model.onnx")
    digest = _model_files._sha256(model_dir / "model.onnx")
    assert emb.name == f"onnx:tiny-model-{digest[:12]}"
    assert OnnxEmbedder(str(model_dir / "model.onnx")).name == emb.name
    assert OnnxEmbedder(model_dir / "model.onnx", pooling="cls").name == emb.name + "-cls"
    assert OnnxEmbedder(model_dir / "model.onnx", name="mine").name == "mine"
    other = write_model(tmp_path / "other" / "encoder.onnx", output="token_embeddings")
    named = OnnxEmbedder(other, tokenizer_path=model_dir / "tokenizer.json")
    assert named.name.startswith("onnx:encoder-") and named.name != emb.name


def test_cls_pooling_takes_the_first_token(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m" / "model.onnx")
    write_tokenizer(tmp_path / "m" / "tokenizer.json", cls=True)
    emb = OnnxEmbedder(model, pooling="cls")
    vectors = emb.embed_batch(["red cat", "blue"])
    np.testing.assert_allclose(vectors, np.stack([unit(TABLE[IDS["[CLS]"]])] * 2), atol=1e-6)
    # Mean pooling with the same tokenizer counts [CLS] too, as the model sees it.
    mean = OnnxEmbedder(model).embed("red cat")
    np.testing.assert_allclose(mean, unit(mean_of("[CLS] red cat")), atol=1e-6)
    assert emb.count_tokens(["red cat"]) == [3]


def test_pooled_output_is_used_as_is(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m" / "model.onnx", pooled=True, output="sentence_embedding")
    write_tokenizer(tmp_path / "m" / "tokenizer.json")
    emb = OnnxEmbedder(model)
    assert emb.pooling == "none"
    np.testing.assert_allclose(emb.embed("red cat"), unit(mean_of("red cat")), atol=1e-6)
    with pytest.raises(EmbedderUnavailableError, match="pooling='mean' needs token states"):
        OnnxEmbedder(model, pooling="mean")
    tokens = write_model(tmp_path / "t" / "model.onnx")
    with pytest.raises(EmbedderUnavailableError, match="pooling='none' needs one vector"):
        OnnxEmbedder(tokens, tmp_path / "m" / "tokenizer.json", pooling="none")


def test_normalize_false_keeps_the_raw_mean(model_dir: Path) -> None:
    emb = OnnxEmbedder(model_dir / "model.onnx", normalize=False)
    np.testing.assert_allclose(emb.embed("dog green"), mean_of("dog green"), atol=1e-6)
    assert emb.name.endswith("-raw")


def test_dimension_from_the_model_from_the_caller_or_a_probe(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m" / "model.onnx", declared_dim=False)
    write_tokenizer(tmp_path / "m" / "tokenizer.json")
    assert OnnxEmbedder(model).dimension == DIM  # learnt from one probe text
    assert OnnxEmbedder(model, dimension=DIM).dimension == DIM
    wrong = OnnxEmbedder(model, dimension=DIM + 1)
    with pytest.raises(EmbedderUnavailableError, match=r"shape \(8,\), expected \(9,\)"):
        wrong.embed("red")
    declared = write_model(tmp_path / "d" / "model.onnx")
    with pytest.raises(InvalidArgumentError, match=r"dimension=4, but .* has 8"):
        OnnxEmbedder(declared, tmp_path / "m" / "tokenizer.json", dimension=4)


def test_optional_checksum(model_dir: Path) -> None:
    model = model_dir / "model.onnx"
    digest = _model_files._sha256(model)
    assert OnnxEmbedder(model, sha256=digest.upper()).dimension == DIM
    with pytest.raises(EmbedderUnavailableError, match=f"expected {'0' * 64}"):
        OnnxEmbedder(model, sha256="0" * 64)
    with pytest.raises(InvalidArgumentError, match="64 hexadecimal digits"):
        OnnxEmbedder(model, sha256="abc")


def test_tokenizer_beside_the_model_or_given(tmp_path: Path, model_dir: Path) -> None:
    alone = write_model(tmp_path / "alone" / "model.onnx")
    with pytest.raises(
        EmbedderUnavailableError, match=r"no tokenizer.json beside .* tokenizer_path="
    ):
        OnnxEmbedder(alone)
    padded = write_tokenizer(tmp_path / "padded.json", pad=True)
    emb = OnnxEmbedder(alone, tokenizer_path=padded)
    # A tokenizer saved with fixed-length padding pads per batch instead.
    assert emb.count_tokens(["red cat"]) == [2]
    np.testing.assert_allclose(emb.embed("red cat"), unit(mean_of("red cat")), atol=1e-6)


def test_inputs_by_name_and_int32(tmp_path: Path, model_dir: Path) -> None:
    tokenizer = model_dir / "tokenizer.json"
    three = write_model(
        tmp_path / "three" / "model.onnx",
        inputs=[
            ("input_ids", TensorProto.INT32),
            ("attention_mask", TensorProto.INT32),
            ("token_type_ids", TensorProto.INT64),
        ],
    )
    emb = OnnxEmbedder(three, tokenizer)
    np.testing.assert_allclose(emb.embed_batch(TEXTS)[2], unit(mean_of(TEXTS[2])), atol=1e-6)
    odd = write_model(
        tmp_path / "odd" / "model.onnx",
        inputs=[("input_ids", TensorProto.INT64), ("pixel_values", TensorProto.INT64)],
    )
    with pytest.raises(EmbedderUnavailableError, match="takes an input 'pixel_values'"):
        OnnxEmbedder(odd, tokenizer)
    with pytest.raises(EmbedderUnavailableError, match="has no output 'pooled'"):
        OnnxEmbedder(model_dir / "model.onnx", output="pooled")


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("pooling", "max", "pooling must be one of"),
        ("dimension", 0, "dimension must be at least 1"),
        ("normalize", "yes", "normalize must be a bool"),
        ("name", "  ", "name must be a non-empty str"),
        ("max_length", 0, "max_length must be at least 1"),
    ],
)
def test_rejects_bad_options(model_dir: Path, option: str, value: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        OnnxEmbedder(model_dir / "model.onnx", **{option: value})  # type: ignore[arg-type]


def test_not_a_model(tmp_path: Path, model_dir: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(EmbedderUnavailableError, match="onnxruntime cannot load"):
        OnnxEmbedder(junk, model_dir / "tokenizer.json")
    with pytest.raises(EmbedderUnavailableError, match=r"model_path .* is not a file"):
        OnnxEmbedder(tmp_path / "missing.onnx")


def test_a_store_with_a_local_model(model_dir: Path, tmp_path: Path) -> None:
    model = model_dir / "model.onnx"
    with memlane.Memory(tmp_path / "store", OnnxEmbedder(model)) as mem:
        mem.add_many([{"text": t} for t in TEXTS])
        hits = mem.search("house green", k=1, mode="vector")
        assert hits[0].record.text == "dog dog green house"
    # Reopened with the same file: the same name, so the store accepts it.
    with memlane.Memory(tmp_path / "store", OnnxEmbedder(str(model))) as mem:
        assert len(mem) == len(TEXTS)


@pytest.mark.parametrize("name", ["a" * 5000, "/proc/self/mem"])
def test_a_model_path_the_system_cannot_read_is_named(name: str) -> None:
    # A name too long, or a file whose read fails (EIO; EACCES for a user who may not
    # read it), raised the bare OSError of Path.is_file or of the hash's read.
    from memlane.embeddings.rerank import CrossEncoder

    for make in (OnnxEmbedder, CrossEncoder):
        with pytest.raises(EmbedderUnavailableError, match=r"cannot be read|no tokenizer\.json"):
            make(name)


def test_a_lone_surrogate_is_named_with_a_tokenizer_of_the_tokenizers_library(
    model_dir: Path,
) -> None:
    # memlane's WordPiece names it; the tokenizers library raised a bare TypeError.
    embedder = OnnxEmbedder(model_dir / "model.onnx")
    calls = [
        lambda: embedder.embed("red \ud800 blue"),
        lambda: embedder.embed_batch(["red", "red \ud800 blue"]),
        lambda: embedder.count_tokens(["\udfff"]),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match="not valid Unicode: a lone surrogate"):
            call()
    assert embedder.embed("red blue").shape == (DIM,)


def test_an_output_or_tokenizer_that_changes_the_vectors_changes_the_name(
    model_dir: Path, tmp_path: Path
) -> None:
    # Both were left out of the name: a store built reading one output of a file opened
    # reading another, and the default model read through another tokenizer was named
    # as the default (whose score cut-offs then applied), each without a word.
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "tokens", DIM])
        for n in ("last_hidden_state", "doubled")
    ]
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"], axis=0),
        helper.make_node("Add", ["last_hidden_state", "last_hidden_state"], ["doubled"]),
    ]
    graph = helper.make_graph(
        nodes, "two-outputs", [ids], outputs, [numpy_helper.from_array(TABLE, "table")]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    path = tmp_path / "two" / "model.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path))
    write_tokenizer(path.parent / "tokenizer.json")
    usual = OnnxEmbedder(path)
    assert OnnxEmbedder(path, output="last_hidden_state").name == usual.name
    assert OnnxEmbedder(path, output="doubled").name == usual.name + "-doubled"

    default = OnnxEmbedder()
    assert default.name == "onnx:all-MiniLM-L6-v2-int8"
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_bytes(memlane.embeddings.default_tokenizer_path().read_bytes() + b"\n")
    own = memlane.embeddings.default_tokenizer_path()
    assert OnnxEmbedder(default._model, tokenizer_path=own).name == default.name
    other = OnnxEmbedder(default._model, tokenizer_path=tokenizer)
    assert other.name.startswith("onnx:") and "-tokenizer-" in other.name


def test_an_output_named_is_read_when_the_default_one_could_not_be(tmp_path: Path) -> None:
    # The name's check of which output is the default one checked that one's shape: a
    # model whose first output is a score raised, whatever output= named.
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])
    outputs = [
        helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch"]),
        helper.make_tensor_value_info("states", TensorProto.FLOAT, ["batch", "tokens", DIM]),
    ]
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["states"], axis=0),
        helper.make_node("ReduceSum", ["states", "axes"], ["score"], keepdims=0),
    ]
    initializers = [
        numpy_helper.from_array(TABLE, "table"),
        numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes"),
    ]
    graph = helper.make_graph(nodes, "score-first", [ids], outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    path = tmp_path / "scored" / "model.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path))
    write_tokenizer(path.parent / "tokenizer.json")
    embedder = OnnxEmbedder(path, output="states")
    assert embedder.name.endswith("-states") and embedder.embed("red").shape == (DIM,)
