"""A cross-encoder reranker for ``search(..., rerank=...)``: an ONNX model from a path the
user gives, run offline with onnxruntime.

A cross-encoder reads the question and a memory together and gives one relevance logit
(sentence-transformers' ``CrossEncoder`` models, such as ms-marco-MiniLM-L-6-v2, exported
to ONNX with its ``tokenizer.json`` beside it). The pair is encoded as BERT's are:
``[CLS] question [SEP] memory [SEP]``, ``token_type_ids`` 0 then 1. memlane ships no
such model and fetches none::

    from memlane.embeddings.rerank import CrossEncoder
    reranker = CrossEncoder("models/ms-marco-MiniLM-L-6-v2/model.onnx")
    hits = mem.search("when did Caroline go hiking?", 5, rerank=reranker)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memlane.embeddings._model_files import given_path, is_file
from memlane.embeddings._onnx import MAX_THREADS, _available_cores, _check_count
from memlane.embeddings._onnx_model import _load_session, _model_inputs
from memlane.embeddings.tokenizer import load_tokenizer
from memlane.errors import EmbedderUnavailableError
from memlane.records import SearchHit

#: The element types of an output whose values are logits.
_FLOAT_TENSORS = frozenset({"tensor(float)", "tensor(double)", "tensor(float16)"})


class CrossEncoder:
    """Scores (question, memory) pairs with an ONNX cross-encoder; calling it reranks hits.

    Args:
        model_path: the ``.onnx`` file; its inputs among ``input_ids``,
            ``attention_mask`` and ``token_type_ids``, its first output the logits
            (``[batch]`` or ``[batch, n]``: the last column is the relevance).
        tokenizer_path: the model's ``tokenizer.json`` (default: beside the model).
        max_length: tokens of a pair at most. A longer pair is cut longest first, as
            sentence-transformers' cross-encoders cut theirs: the longer of the question
            and the memory loses tokens until both fit, so neither leaves the other
            none. The memory keeps its start and the question its end (where
            ``search_knowledge`` puts the query, after the conversation's messages).
        batch_size: pairs per model run.
        threads: onnxruntime intra-op threads (default: one per available core).

    Raises:
        EmbedderUnavailableError: a file is missing, onnxruntime cannot load it, or its
            first output is not a float tensor of one or two axes; at scoring, a run
            that fails or gives no finite logit per pair.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        max_length: int = 512,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        model = given_path(model_path, "model_path")
        if not is_file(model, "model_path"):
            raise EmbedderUnavailableError(f"no cross-encoder model at {model}")
        tokenizer = (
            model.parent / "tokenizer.json"
            if tokenizer_path is None
            else given_path(tokenizer_path, "tokenizer_path")
        )
        if not is_file(tokenizer, "tokenizer_path"):
            raise EmbedderUnavailableError(
                f"no tokenizer.json at {tokenizer}; pass tokenizer_path= (the model's own)"
            )
        self.max_length = _check_count(max_length, "max_length", 3)
        self.batch_size = _check_count(batch_size, "batch_size", 1)
        cores = (
            _available_cores()
            if threads is None
            else _check_count(threads, "threads", 1, MAX_THREADS)
        )
        self._session = _load_session(model, cores)
        self._feeds = _model_inputs(self._session, model)
        self._model = model
        self._output = _logits_output(self._session, model)
        self._tokenizer = load_tokenizer(tokenizer, None, EmbedderUnavailableError)
        # A pair is built as [CLS] question [SEP] text [SEP] from the question's own
        # special tokens: a tokenizer that adds none would lend two of its words.
        if (added := self._tokenizer.num_special_tokens) != 2:
            raise EmbedderUnavailableError(
                f"{tokenizer} adds {added} special tokens to a text; a cross-encoder's "
                "tokenizer adds two ([CLS] and [SEP], or <s> and </s>)"
            )

    def _pair(self, question: list[int], text: str) -> tuple[list[int], list[int]]:
        """The ids of ``[CLS] question [SEP] text [SEP]`` and their token types, cut
        longest first to ``max_length`` (``question``: the query's ids with its special
        tokens, ``[CLS] ... [SEP]``)."""
        cls, words, sep = question[:1], question[1:-1], question[-1:]
        memory = self._tokenizer.encode(text, add_special_tokens=False).ids
        room = max(self.max_length - len(cls) - 2 * len(sep), 0)
        kept, memory_kept = _longest_first(len(words), len(memory), room)
        first = cls + words[len(words) - kept :] + sep
        second = memory[:memory_kept] + sep
        return first + second, [0] * len(first) + [1] * len(second)

    def _run(self, feed: dict[str, Any], pairs: int) -> list[float]:
        """The relevance logit of each of ``pairs`` pairs: the model's output is one per
        pair (``[pairs]``) or a row per pair whose last column is the relevance."""
        try:
            out = self._session.run([self._output], feed)[0]
        except Exception as e:  # onnxruntime's own exception types are not public
            raise EmbedderUnavailableError(f"onnxruntime cannot run {self._model}: {e}") from e
        logits = np.asarray(out)
        if (
            logits.dtype.kind != "f"
            or logits.ndim not in (1, 2)
            or logits.shape[0] != pairs
            or logits.size == 0
        ):
            raise EmbedderUnavailableError(
                f"{self._model}'s output {self._output!r} has shape {logits.shape} "
                f"({logits.dtype}) for {pairs} pairs; a cross-encoder gives a logit per "
                f"pair, [{pairs}] or [{pairs}, n]"
            )
        relevance = logits.astype(np.float64).reshape(pairs, -1)[:, -1]
        if not np.isfinite(relevance).all():
            # A NaN compares false with everything: the order would be arbitrary.
            raise EmbedderUnavailableError(
                f"{self._model} gave a non-finite relevance logit (NaN or infinity)"
            )
        scores: list[float] = relevance.tolist()
        return scores

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        """The relevance logit of each text for ``query``."""
        question = self._tokenizer.encode(query, add_special_tokens=True).ids
        out: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            pairs = [self._pair(question, t) for t in texts[start : start + self.batch_size]]
            width = max(len(ids) for ids, _ in pairs)
            ids = np.full((len(pairs), width), self._tokenizer.pad_id, dtype=np.int64)
            types = np.zeros((len(pairs), width), dtype=np.int64)
            mask = np.zeros((len(pairs), width), dtype=np.int64)
            for i, (p, t) in enumerate(pairs):
                ids[i, : len(p)], types[i, : len(t)], mask[i, : len(p)] = p, t, 1
            given = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            feed: dict[str, Any] = {n: given[n].astype(dtype) for n, dtype in self._feeds}
            out.extend(self._run(feed, len(pairs)))
        return out

    def __call__(self, query: str, hits: list[SearchHit]) -> list[SearchHit]:
        """``hits`` by the model's score, best first (ties keep the search's order)."""
        scores = self.scores(query, [h.record.text for h in hits])
        order = sorted(range(len(hits)), key=lambda i: -scores[i])
        return [hits[i] for i in order]


def _logits_output(session: Any, model: Path) -> str:
    """The name of the model's first output, refused unless it can be one logit per pair:
    a float tensor of one or two axes (onnxruntime gives no axes when the model leaves
    them undeclared; the run's output is checked then)."""
    output = session.get_outputs()[0]
    shape = list(output.shape or [])
    if output.type not in _FLOAT_TENSORS or len(shape) > 2:
        raise EmbedderUnavailableError(
            f"{model}'s first output {output.name!r} is {output.type} of shape {shape}; a "
            "cross-encoder's is its logits, float [batch] or [batch, n]"
        )
    name: str = output.name
    return name


def _longest_first(first: int, second: int, room: int) -> tuple[int, int]:
    """How many tokens of two sequences fit in ``room`` when the longer loses one at a
    time (the tokenizers library's ``longest_first``): the shorter stays whole if it
    takes at most half, else each gets half (the second the odd token)."""
    if first + second <= room:
        return first, second
    if min(first, second) <= room // 2:
        return (first, room - first) if first <= second else (room - second, second)
    return room // 2, room - room // 2
