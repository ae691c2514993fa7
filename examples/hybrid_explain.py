"""Hybrid search with explanations: why each result ranks where it does.

BM25 finds exact words (names, codes); the vector index finds paraphrases;
weighted fusion mixes the two (cosine and BM25 over the query's ceiling); importance and
recency then boost the relevance within a bounded band.

Run: python examples/hybrid_explain.py
"""

from __future__ import annotations

import memlane

MEMORIES = [
    "Error E1042 means the payment provider timed out.",
    "When a card payment hangs, retry once and then switch provider.",
    "The checkout page was redesigned in March.",
    "Invoices are emailed on the first day of the month.",
]


def main() -> None:
    with memlane.Memory() as mem:
        mem.add_many([{"text": t} for t in MEMORIES])
        query = "what does E1042 mean when a payment hangs?"
        print(f"? {query}\n")
        for mode in ("text", "vector", "hybrid"):
            hits = mem.search(query, k=2, mode=mode, explain=True)
            print(f"{mode}:")
            for hit in hits:
                print(f"  {hit.score:.3f}  {hit.record.text}")
        print()
        hits = mem.search(query, k=3, explain=True)
        for hit in hits:
            assert hit.explain is not None
            e = hit.explain
            print(f"{hit.record.text}")
            ranks = f"bm25 rank {e['bm25_rank'] or '-'}, vector rank {e['vector_rank'] or '-'}"
            print(
                f"  bm25 {e['bm25'] or 0:.2f}  cosine {e['cosine'] or 0:.3f}  ({ranks})  "
                f"relevance {e['relevance']:.3f}  score {e['score']:.3f}"
            )
        assert hits[0].record.text.startswith("Error E1042")
        # Only the vectors find the paraphrase; only BM25 scores the code.
        assert hits[0].explain is not None and hits[0].explain["bm25_rank"] == 1


if __name__ == "__main__":
    main()
