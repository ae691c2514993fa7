"""The tokenizer of an ONNX model, and of token counts: one interface, two makers.

- ``memlane._core.WordPiece`` reads BERT's WordPiece ``tokenizer.json``
  files (the default model's among them) and gives the ids and offsets the
  ``tokenizers`` library gives, with no dependency.
- Any other ``tokenizer.json``, and a ``tokenizers.Tokenizer`` a caller passes,
  need the ``tokenizers`` library (an optional extra): ``HfTokenizer``
  puts it behind the same interface.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from memlane._core import WordPiece
from memlane.errors import InvalidArgumentError, MemlaneError

TOKENIZERS_INSTALL = "pip install 'memlane[tokenizers]'"


class Encoding(Protocol):
    """One text's tokens: ids, each token's character span, and whether it was cut."""

    @property
    def ids(self) -> list[int]: ...
    @property
    def offsets(self) -> list[tuple[int, int]]: ...
    @property
    def truncated(self) -> bool: ...


class Tokenizer(Protocol):
    """Encodes texts, cut to its ``max_length`` if it has one, padding nothing."""

    @property
    def pad_id(self) -> int: ...
    @property
    def num_special_tokens(self) -> int: ...
    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding: ...
    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> Sequence[Encoding]: ...


class _HfEncoding(NamedTuple):
    ids: list[int]
    offsets: list[tuple[int, int]]
    truncated: bool


class HfTokenizer:
    """A ``tokenizers.Tokenizer`` behind ``Tokenizer``; it is changed (padding off,
    truncation at ``max_length`` or none), so pass a copy of one that is not yours."""

    def __init__(self, tokenizer: Any, max_length: int | None) -> None:
        padding = tokenizer.padding
        self.pad_id = int(padding["pad_id"]) if padding else 0
        post = tokenizer.post_processor
        self.num_special_tokens = 0 if post is None else int(post.num_special_tokens_to_add(False))
        tokenizer.no_padding()
        if max_length is None:
            tokenizer.no_truncation()
        else:
            tokenizer.enable_truncation(max_length)
        self._tokenizer = tokenizer

    def encode(self, text: str, add_special_tokens: bool = True) -> _HfEncoding:
        _unicode(text, "text")
        return _encoding(self._tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[_HfEncoding]:
        items = list(texts)
        for i, text in enumerate(items):
            _unicode(text, f"texts[{i}]")
        encodings = self._tokenizer.encode_batch(items, add_special_tokens=add_special_tokens)
        return [_encoding(e) for e in encodings]


def _unicode(text: str, label: str) -> None:
    """Raises ``InvalidArgumentError`` for a text with no UTF-8 form (a lone surrogate),
    as memlane's WordPiece does: ``tokenizers`` raises a bare ``TypeError``."""
    if isinstance(text, str) and not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                f"{label} is not valid Unicode: a lone surrogate at position {e.start}"
            ) from None


def _encoding(e: Any) -> _HfEncoding:
    return _HfEncoding(e.ids, e.offsets, bool(e.overflowing))


def load_tokenizer(
    path: str | os.PathLike[str], max_length: int | None, error: type[MemlaneError]
) -> Tokenizer:
    """The tokenizer ``path`` describes, cutting at ``max_length`` (None: never).

    memlane's WordPiece when it reads the file, else ``tokenizers`` if installed.

    Raises:
        error: the file cannot be read, or needs ``tokenizers`` and it is missing
            or cannot load it.
    """
    try:
        return WordPiece.from_file(path, max_length)
    except InvalidArgumentError as e:
        refusal = e  # another kind of tokenizer: tokenizers may read it
    except MemlaneError as e:  # not found, unreadable
        raise error(f"cannot read the tokenizer {os.fspath(path)}: {e}") from e
    try:
        from tokenizers import Tokenizer as Tokenizers
    except ImportError:
        raise error(
            f"{refusal}; memlane reads BERT WordPiece tokenizers itself, others need the "
            f"tokenizers library: {TOKENIZERS_INSTALL}"
        ) from None
    try:
        tokenizer = Tokenizers.from_file(os.fspath(path))
    except Exception as e:  # tokenizers raises a bare Exception for a bad file
        raise error(f"tokenizers cannot load {os.fspath(path)}: {e}") from e
    return HfTokenizer(tokenizer, max_length)
