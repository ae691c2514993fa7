"""RAG knowledge from a folder: ingest documents, search fragments, build a prompt.

Run: python examples/rag_knowledge.py [FOLDER]
(by default the short docs about memlane that the package ships)
"""

from __future__ import annotations

import sys
from pathlib import Path

import memlane
from memlane.cli.demo import knowledge_dir


def main(folder: Path) -> None:
    with memlane.Memory() as mem:
        # Shared knowledge is read by every agent; agent_id=... makes it one agent's own.
        report = mem.ingest(folder, shared=True, progress=False)
        print(report)
        assert report.ok and report.fragments > 0
        # Ingesting again touches only what changed.
        assert mem.ingest(folder, shared=True, progress=False).fragments == 0

        question = "How are the ranked lists of BM25 and the vector index fused?"
        hits = mem.search_knowledge(question, agent_id="assistant", k=2)
        context = "\n\n".join(f"[{h.record.metadata['source']}] {h.record.text}" for h in hits)
        prompt = f"Answer from the context.\n\nContext:\n{context}\n\nQuestion: {question}"
        print(prompt)
        if folder == knowledge_dir():
            assert hits[0].record.text.startswith("Hybrid search > Fusion"), hits[0]
        for doc in mem.list_documents():
            print(f"document {doc.metadata['source']}: {len(mem.get_fragments(doc.id))} fragments")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else knowledge_dir())
