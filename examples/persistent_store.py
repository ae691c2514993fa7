"""A persistent store: write, close, reopen (even in another process) and find it all again.

Run: python examples/persistent_store.py [STORE_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import memlane


def main(path: Path) -> None:
    with memlane.Memory(path) as mem:
        record = mem.add(
            "Dana is training for the Berlin marathon.",
            user_id="dana",
            importance=0.8,
            metadata={"source": "chat"},
        )
        mem.add("Dana prefers metric units.", user_id="dana")
        print(f"wrote {len(mem)} memories to {path}")
    # Closing wrote an index snapshot; reopening loads it instead of rebuilding.

    with memlane.Memory(path) as mem:
        print(f"reopened: {mem!r}")
        again = mem.get(record.id)
        assert again.text == record.text and again.metadata == {"source": "chat"}
        hit = mem.search("What race is Dana preparing for?", k=1, user_id="dana")[0]
        print(f"  {hit.score:.3f}  {hit.record.text}")
        assert hit.record.id == record.id
        # Export to JSON Lines, e.g. for a backup or another store.
        n = mem.export_jsonl(path / "backup.jsonl", embeddings=False)
        print(f"exported {n} records to backup.jsonl")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "store")
