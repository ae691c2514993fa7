"""``add_many(progress=True)``'s progress bar."""

from __future__ import annotations

from typing import Any

__all__ = ["PROGRESS_PART", "progress_bar"]

#: Texts embedded between two moves of ``add_many``'s progress bar.
PROGRESS_PART = 512


def progress_bar(total: int) -> Any:
    """``add_many(progress=True)``'s bar on stderr (tqdm: rate, ETA, terminal width)."""
    from tqdm import tqdm

    return tqdm(total=total, desc="add_many", unit="records", dynamic_ncols=True)
