"""memlane as a LangChain vector store and hybrid retriever, offline.

Needs the extra: pip install "memlane[langchain]".
Run: python examples/langchain_vectorstore.py
"""

from __future__ import annotations

from langchain_core.documents import Document

import memlane
from memlane.integrations.langchain import MemlaneEmbeddings, MemlaneVectorStore


def main() -> None:
    # memlane's offline embedder as LangChain Embeddings; any other Embeddings works too.
    embeddings = MemlaneEmbeddings()
    with memlane.Memory(embedder=embeddings.embedder) as mem:
        # Two users share the store; each vector store is bound to one of them.
        alice = MemlaneVectorStore(embeddings, memory=mem, scope={"user_id": "alice"})
        bob = MemlaneVectorStore(embeddings, memory=mem, scope={"user_id": "bob"})
        alice.add_documents(
            [
                Document("Alice prefers dark mode in every editor", metadata={"kind": "pref"}),
                Document("Alice is allergic to peanuts", metadata={"kind": "health"}),
                Document(
                    "Release v2 ships with the blue-green deploy script",
                    id="rel-2",
                    metadata={"kind": "work"},
                ),
            ]
        )
        bob.add_texts(["Bob prefers light mode"], metadatas=[{"kind": "pref"}])

        for doc, score in alice.similarity_search_with_score(
            "which editor theme does she like?", k=2
        ):
            print(f"{score:.3f}  {doc.page_content}")
        prefs = alice.similarity_search("theme", k=5, filter={"kind": "pref"})
        assert [d.page_content for d in prefs] == ["Alice prefers dark mode in every editor"]

        # Hybrid search: BM25 finds the exact words, vectors the meaning, fused in one call.
        retriever = alice.as_hybrid_retriever(k=1)
        best = retriever.invoke("blue-green deploy")
        print("hybrid:", best[0].page_content)
        assert best[0].id == "rel-2"

        assert bob.get_by_ids(["rel-2"]) == []  # Alice's documents are not Bob's
        print("bob sees:", [d.page_content for d in bob.similarity_search("mode", k=5)])


if __name__ == "__main__":
    main()
