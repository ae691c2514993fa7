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

from memlane.embeddings._onnx import _available_cores, _check_count
from memlane.embeddings._onnx_model import _load_session, _model_inputs
from memlane.embeddings.tokenizer import load_tokenizer
from memlane.errors import EmbedderUnavailableError
from memlane.records import SearchHit


class CrossEncoder:
    """Scores (question, memory) pairs with an ONNX cross-encoder; calling it reranks hits.

    Args:
        model_path: the ``.onnx`` file; its inputs among ``input_ids``,
            ``attention_mask`` and ``token_type_ids``, its first output the logits
            (``[batch]`` or ``[batch, n]``: the last column is the relevance).
        tokenizer_path: the model's ``tokenizer.json`` (default: beside the model).
        max_length: tokens of a pair at most (the memory's end is cut).
        batch_size: pairs per model run.
        threads: onnxruntime intra-op threads (default: one per available core).

    Raises:
        EmbedderUnavailableError: a file is missing or onnxruntime cannot load it.
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
        model = Path(model_path)
        if not model.is_file():
            raise EmbedderUnavailableError(f"no cross-encoder model at {model}")
        tokenizer = Path(tokenizer_path) if tokenizer_path else model.parent / "tokenizer.json"
        if not tokenizer.is_file():
            raise EmbedderUnavailableError(
                f"no tokenizer.json at {tokenizer}; pass tokenizer_path= (the model's own)"
            )
        self.max_length = _check_count(max_length, "max_length", 3)
        self.batch_size = _check_count(batch_size, "batch_size", 1)
        cores = _available_cores() if threads is None else _check_count(threads, "threads", 1)
        self._session = _load_session(model, cores)
        self._feeds = _model_inputs(self._session, model)
        self._output = self._session.get_outputs()[0].name
        self._tokenizer = load_tokenizer(tokenizer, None, EmbedderUnavailableError)

    def _pair(self, question: list[int], text: str) -> tuple[list[int], list[int]]:
        """The ids of ``[CLS] question [SEP] text [SEP]`` and their token types."""
        sep = question[-1:]
        room = max(self.max_length - len(question) - len(sep), 0)
        second = self._tokenizer.encode(text, add_special_tokens=False).ids[:room] + sep
        ids = (question + second)[: self.max_length]
        return ids, ([0] * len(question) + [1] * len(second))[: self.max_length]

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
            logits = np.asarray(self._session.run([self._output], feed)[0], dtype=np.float64)
            out.extend(logits.reshape(len(pairs), -1)[:, -1].tolist())
        return out

    def __call__(self, query: str, hits: list[SearchHit]) -> list[SearchHit]:
        """``hits`` by the model's score, best first (ties keep the search's order)."""
        scores = self.scores(query, [h.record.text for h in hits])
        order = sorted(range(len(hits)), key=lambda i: -scores[i])
        return [hits[i] for i in order]
