"""Drop-in replacements for libraries agents already use, on memlane's Rust engine.

- ``memlane.compat.hnswlib``: hnswlib's ``Index`` and ``BFIndex``
  (``import memlane.compat.hnswlib as hnswlib``).
- ``memlane.compat.rank_bm25``: rank_bm25's ``BM25Okapi``, ``BM25L`` and ``BM25Plus``,
  same scores (``from memlane.compat.rank_bm25 import BM25Okapi, BM25L, BM25Plus``).

Each module is imported on its own; this package imports neither.
"""

from __future__ import annotations

__all__: list[str] = []
