"""Opening an ONNX sentence-embedding model for ``memlane.embeddings.OnnxEmbedder``:
its onnxruntime session, the inputs and output the model declares, and the pooling of
its token states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane.coerce import FloatArray
from memlane.errors import EmbedderUnavailableError

_INPUT_IDS, _MASK, _TOKEN_TYPES = "input_ids", "attention_mask", "token_type_ids"
_INPUTS = (_INPUT_IDS, _MASK, _TOKEN_TYPES)
#: Output names that hold per-token states, tried in this order.
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
_DTYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


def _load_session(model: Path, threads: int) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise EmbedderUnavailableError(
            f"onnxruntime is not installed ({e}); install it with: pip install onnxruntime"
        ) from e
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # onnxruntime's default spinning stays: with several threads a run, on idle cores it
    # is the fastest for one short text (no spinning and "force_spinning_stop" measured
    # slower; figures in benches/README.md, "Figures behind the code"). OnnxEmbedder
    # asks for one thread a run, which has no pool to spin.

    # The arena keeps the largest run's memory for the life of the session (2.8 GB
    # after one batch of 256-token texts); memlane lives in other people's processes.
    options.enable_cpu_mem_arena = False
    try:
        return ort.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # onnxruntime's own exception types are not public
        raise EmbedderUnavailableError(f"onnxruntime cannot load {model}: {e}") from e


def _model_inputs(session: Any, model: Path) -> list[tuple[str, Any]]:
    """The feeds the model declares, each with its integer dtype; ``input_ids`` required."""
    feeds: list[tuple[str, Any]] = []
    for node in session.get_inputs():
        if node.name not in _INPUTS:
            raise EmbedderUnavailableError(
                f"{model} takes an input {node.name!r}; a sentence-embedding model's inputs "
                f"are among {', '.join(_INPUTS)}"
            )
        dtype = _DTYPES.get(node.type)
        if dtype is None:
            raise EmbedderUnavailableError(
                f"{model}'s input {node.name!r} is {node.type}; int64 or int32 is expected"
            )
        feeds.append((node.name, dtype))
    if _INPUT_IDS not in {feed for feed, _ in feeds}:
        raise EmbedderUnavailableError(f"{model} has no input named {_INPUT_IDS!r}")
    return feeds


def _usual_output(session: Any) -> str:
    """The output read when none is named: a token states' one, else the first."""
    names = [node.name for node in session.get_outputs()]
    return next((n for n in _TOKEN_OUTPUTS if n in names), names[0])


def _model_output(session: Any, model: Path, wanted: str | None) -> tuple[str, int, int | None]:
    """The output to read: its name, its number of axes, and its last axis if declared."""
    outputs = {node.name: node for node in session.get_outputs()}
    if wanted is not None:
        if wanted not in outputs:
            raise EmbedderUnavailableError(
                f"{model} has no output {wanted!r}; its outputs: {', '.join(outputs)}"
            )
        chosen = wanted
    else:
        chosen = _usual_output(session)
    shape = list(outputs[chosen].shape or [])
    if len(shape) not in (2, 3):
        raise EmbedderUnavailableError(
            f"{model}'s output {chosen!r} has shape {shape}; (batch, tokens, dimension) or "
            "(batch, dimension) is expected"
        )
    last = shape[-1]
    return chosen, len(shape), last if isinstance(last, int) and last > 0 else None


def _mean_pool_normalised(
    hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]
) -> FloatArray:
    """Mean of the token states under the mask, scaled to unit length (float32 throughout)."""
    weights = mask.astype(np.float32)
    pooled = np.einsum("bsd,bs->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
    return _normalised(pooled)


def _normalised(vectors: npt.NDArray[np.float32]) -> FloatArray:
    """Each row scaled to unit length (a zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    result: FloatArray = vectors / np.maximum(norms, np.finfo(np.float32).tiny)
    return result
