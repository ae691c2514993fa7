"""``Identified``: an embedder's name and dimension, fixed when it is made."""

from __future__ import annotations

__all__ = ["Identified"]


class Identified:
    """The ``name`` and ``dimension`` of an embedder that knows them when it is made,
    read-only: what the embedders that wrap, stand in for or defer a model share."""

    def __init__(self, name: str, dimension: int) -> None:
        self._name = name
        self._dimension = dimension

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension
