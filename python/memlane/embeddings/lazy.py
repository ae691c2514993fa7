"""An embedder that loads its model on first use, so opening a store costs no model load."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from memlane.embeddings._base import Embedder, FloatArray, is_asymmetric
from memlane.embeddings.identity import Identified
from memlane.errors import EmbedderMismatchError

__all__ = [
    "DEFAULT_DIMENSION",
    "DEFAULT_NAME",
    "LazyEmbedder",
    "default_embedder",
    "is_default_model",
]

#: Name and dimension of ``memlane.OnnxEmbedder``, known without loading it.
DEFAULT_NAME = "onnx:all-MiniLM-L6-v2-int8"
DEFAULT_DIMENSION = 384


def is_default_model(embedder: Embedder | None) -> bool:
    """Whether ``embedder`` is the default model, the one memlane's score cut-offs are
    measured with (a cut-off means nothing for another model's cosines)."""
    return (
        embedder is not None
        and embedder.name == DEFAULT_NAME
        and int(embedder.dimension) == DEFAULT_DIMENSION
    )


class LazyEmbedder(Identified):
    """Stands for the embedder ``factory`` builds, building it at the first embed call.

    ``name``, ``dimension`` and ``asymmetric`` must be those of the built embedder
    (a cache in front reads them before anything is built); a mismatch raises
    ``EmbedderMismatchError`` at that first call.
    """

    def __init__(
        self,
        factory: Callable[[], Embedder],
        name: str,
        dimension: int,
        *,
        asymmetric: bool = False,
    ) -> None:
        super().__init__(name, dimension)
        self.asymmetric = asymmetric
        self._factory = factory
        self._inner: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._inner is not None

    def get(self) -> Embedder:
        """The real embedder, built now if it was not yet."""
        inner = self._inner
        if inner is None:
            with self._lock:
                if self._inner is None:
                    built = self._factory()
                    got = (built.name, built.dimension, is_asymmetric(built))
                    if got != (self._name, self._dimension, self.asymmetric):
                        raise EmbedderMismatchError(
                            "the embedder built (name, dimension, asymmetric) "
                            f"{got} is not the one announced "
                            f"{(self._name, self._dimension, self.asymmetric)}"
                        )
                    self._inner = built
                inner = self._inner
        return inner

    def embed(self, text: str) -> FloatArray:
        return self.get().embed(text)

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        return self.get().embed_batch(texts)

    def __repr__(self) -> str:
        state = "loaded" if self.loaded else "not loaded yet"
        return f"LazyEmbedder(name={self._name!r}, dimension={self._dimension}, {state})"


def default_embedder() -> LazyEmbedder:
    """The default ``OnnxEmbedder``, loaded when first needed."""

    def build() -> Embedder:
        from memlane.embeddings._onnx import OnnxEmbedder

        return OnnxEmbedder()

    return LazyEmbedder(build, DEFAULT_NAME, DEFAULT_DIMENSION)
