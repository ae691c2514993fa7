"""Basic store and search: add a few memories, then ask for them in other words.

Run: python examples/basic_search.py
"""

from __future__ import annotations

import memlane


def main() -> None:
    # No path: the store lives in memory and is gone at close. The default
    # embedder (all-MiniLM-L6-v2, offline) loads at the first text to embed.
    with memlane.Memory() as mem:
        mem.add_many(
            [
                {"text": "Alice prefers dark mode in every app."},
                {"text": "Bob is allergic to peanuts."},
                {"text": "The nightly backup failed because the disk was full."},
                {"text": "To release a new version, tag the commit and let CI publish it."},
            ]
        )
        for question in ("Which colour theme does Alice like?", "Who can't eat nuts?"):
            hits = mem.search(question, k=2)
            print(f"? {question}")
            for hit in hits:
                print(f"  {hit.score:.3f}  {hit.record.text}")
        best = mem.search("how do we ship a release?", k=1)[0]
        assert best.record.text.startswith("To release"), best


if __name__ == "__main__":
    main()
