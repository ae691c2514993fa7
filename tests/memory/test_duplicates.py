"""add_many(unique=True) against a plain reference: every item compared with every
stored record and every earlier stored item of the batch, one pair at a time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import Memory

DIM = 8
THRESHOLD = 0.9


class VectorsOnly:
    """Every item brings its vector; the embedder is never asked."""

    name = "vectors-only"
    dimension = DIM

    def embed(self, text: str) -> np.ndarray:
        raise AssertionError(text)

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        raise AssertionError(texts)


def _reference(
    stored: list[dict[str, Any]], batch: list[dict[str, Any]], mode: str
) -> list[tuple[str | None, str | None]]:
    """(duplicate kind, id of what it duplicates) per batch item."""

    def unit(v: np.ndarray) -> np.ndarray:
        return v / np.linalg.norm(v)

    kept: list[dict[str, Any]] = []
    out: list[tuple[str | None, str | None]] = []
    for item in batch:
        same = [s for s in stored + kept if s["agent_id"] == item["agent_id"]]
        if item["unique"]:
            exact = [s for s in same if s["text"] == item["text"]]
            if exact:
                out.append(("exact", exact[0]["id"]))
                continue
            earlier = [s for s in kept if s["agent_id"] == item["agent_id"]]
            near = [
                s for s in earlier if unit(s["embedding"]) @ unit(item["embedding"]) >= THRESHOLD
            ]
            if not near:
                scored = [
                    (float(unit(s["embedding"]) @ unit(item["embedding"])), s)
                    for s in stored
                    if s["agent_id"] == item["agent_id"]
                ]
                best = max(scored, key=lambda x: x[0], default=None)
                near = [best[1]] if best is not None and best[0] >= THRESHOLD else []
            if near and mode == "skip":
                out.append(("near", near[0]["id"]))
                continue
            out.append(("near", near[0]["id"]) if near else (None, None))
        else:
            out.append((None, None))
        kept.append(item)
    return out


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    bases = rng.normal(size=(6, DIM)).astype(np.float32)

    def item(i: int, prefix: str) -> dict[str, Any]:
        base = bases[int(rng.integers(len(bases)))]
        # Far below or far above the threshold: graph search and exact maths agree.
        noise = 0.02 if rng.random() < 0.5 else 3.0
        return {
            "id": f"{prefix}{i}",
            "text": f"text {int(rng.integers(4))}",
            "agent_id": f"agent{int(rng.integers(2))}",
            "embedding": (base + rng.normal(scale=noise, size=DIM)).astype(np.float32),
            "unique": bool(rng.random() < 0.7),
        }

    stored = [item(i, "s") for i in range(draw(st.integers(0, 12)))]
    for s in stored:
        s["unique"] = False
    batch = [item(i, "b") for i in range(draw(st.integers(1, 12)))]
    return stored, batch


@pytest.mark.parametrize("mode", ["mark", "skip"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case())
def test_batch_decisions_match_the_pairwise_reference(
    mode: str, case: tuple[list[dict[str, Any]], list[dict[str, Any]]]
) -> None:
    stored, batch = case
    # Texts of stored records must not collide with each other's exact checks
    # through the stored ones: exact duplicates among stored records are allowed.
    with Memory(
        None,
        embedder=VectorsOnly(),
        near_duplicate=mode,  # type: ignore[arg-type]
        dedup_threshold=THRESHOLD,
        hnsw_precision="f32",
    ) as mem:
        if stored:
            mem.add_many(stored)
        got = mem.add_many(batch)
        want = _reference(stored, batch, mode)
        for rec, (kind, target) in zip(got, want, strict=True):
            assert rec.duplicate == kind
            if kind is not None:
                assert rec.duplicate_of == target
        # Whatever was stored is retrievable; what was skipped is not.
        skipped = {
            b["id"]
            for b, (k, _) in zip(batch, want, strict=True)
            if k in ("exact",) or (k == "near" and mode == "skip")
        }
        for b in batch:
            assert (b["id"] in mem) == (b["id"] not in skipped)
