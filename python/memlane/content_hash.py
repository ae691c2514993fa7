"""What "the same content" means to ``memlane.Memory.add``: the text compared
(``normalise_text``) and its hash (``content_hash``), stored beside each record.

What an add takes for a duplicate, by this hash and otherwise, is decided in
``memlane._memory.duplicates``.
"""

from __future__ import annotations

import hashlib
import unicodedata

__all__ = ["content_hash", "normalise_text"]


def normalise_text(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed and stripped: what "the same content" compares."""
    if text.isascii():  # NFKC leaves ASCII as it is, and casefold is lower there
        return " ".join(text.lower().split())
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.casefold().split())


def content_hash(text: str) -> str:
    """sha256 (hex) of ``normalise_text``."""
    return hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()
