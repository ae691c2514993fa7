"""The ``Embedder`` protocol and the input checks every embedder shares."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from memlane.coerce import FloatArray
from memlane.errors import InvalidArgumentError, shown

__all__ = [
    "Embedder",
    "FloatArray",
    "TextTruncatedWarning",
    "check_text",
    "check_texts",
    "is_asymmetric",
    "quoted",
]


@runtime_checkable
class Embedder(Protocol):
    """Turns text into unit-length ``float32`` vectors of a fixed dimension.

    Plug in your own model by writing a class with these four members.

    ``name`` identifies the model and so its vector space, e.g.
    ``"onnx:all-MiniLM-L6-v2-int8"``: a store records it and refuses vectors of
    another space, so keep it stable across versions and change it when the
    vectors change.

    An embedder that embeds a question (``embed``) differently from a text to store
    (``embed_batch``), as e5's ``"query: "`` and ``"passage: "`` do, also sets a class
    attribute ``asymmetric = True``: the caches then never answer a question with the
    vector the same words were stored with (or the other way round).
    """

    @property
    def name(self) -> str:
        """Stable identifier of the model and its vector space."""
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    def embed(self, text: str) -> FloatArray:
        """One text's vector, shape ``(dimension,)``."""
        ...

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        """The texts' vectors in input order, shape ``(len(texts), dimension)``."""
        ...


#: Characters of a text an error message quotes at most: a refused text may be
#: megabytes, and a message goes to logs, HTTP answers and a model's tool results.
QUOTED_CHARS = 80


def quoted(text: str) -> str:
    """``text``'s repr for an error message: whole if short, else its first
    ``QUOTED_CHARS`` characters, an ellipsis and its length."""
    if len(text) <= QUOTED_CHARS:
        return repr(text)
    return f"{text[:QUOTED_CHARS]!r}... ({len(text):,} characters)"


def is_asymmetric(embedder: object) -> bool:
    """Whether ``embedder`` embeds a question unlike a stored text (see ``Embedder``)."""
    return getattr(embedder, "asymmetric", False) is True


class TextTruncatedWarning(UserWarning):
    """Some texts were longer than the model's limit; only their start was embedded.

    ``count`` says how many (1 when a plain message was warned); ``indices``,
    for a warning about one batch, are their positions in it; ``max_length``
    is the model's limit in tokens when the warning knows it (else 0).
    """

    def __init__(
        self, message: str, *, count: int = 1, indices: tuple[int, ...] = (), max_length: int = 0
    ) -> None:
        super().__init__(message)
        self.count = count
        self.indices = indices
        self.max_length = max_length


def check_text(text: object, label: str = "text") -> str:
    """Return ``text`` if it is a ``str`` with something besides whitespace in it."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{label} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidArgumentError(
            f"{label} is empty or whitespace-only; there is nothing to embed ({quoted(text)})"
        )
    return text


def check_texts(texts: Sequence[str]) -> list[str]:
    """Check every text as ``check_text`` does, naming the index of the first bad one."""
    if isinstance(texts, str | bytes):
        # A str is a sequence of one-character strings: embedding those is never meant.
        raise InvalidArgumentError(
            f"embed_batch takes a sequence of texts, got a single {type(texts).__name__}; "
            "use embed() for one text"
        )
    try:
        items = list(texts)
    except TypeError:
        raise InvalidArgumentError(
            f"texts must be a sequence of str, got {type(texts).__name__}"
        ) from None
    for i, text in enumerate(items):
        check_text(text, f"texts[{i}]")
    return items


def check_embedder(embedder: object) -> None:
    """Raises ``InvalidArgumentError`` unless ``embedder`` is one a store can pin: an
    ``Embedder`` whose ``name`` is a non-empty str (the store records it, and an empty
    one means text only) and whose ``dimension`` an int of at least 1."""
    if isinstance(embedder, str):
        raise InvalidArgumentError(
            f"embedder must be an Embedder or None, got the string {embedder!r}: "
            "pass embedder=None for a text-only store (the CLI's --embedder names "
            "are not taken here)"
        )
    if not isinstance(embedder, Embedder):
        raise InvalidArgumentError(
            f"embedder must follow the Embedder protocol (name, dimension, embed, "
            f"embed_batch), got {type(embedder).__name__}"
        )
    name, dimension = embedder.name, embedder.dimension
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(
            f"the embedder's name must be a non-empty str, got {shown(name)}"
        )
    if isinstance(dimension, bool) or not isinstance(dimension, numbers.Integral) or dimension < 1:
        raise InvalidArgumentError(
            f"the embedder's dimension must be an int >= 1, got {shown(dimension)}"
        )
