"""Which searches the server runs on its event loop, and which in a worker thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlane.memory import Memory

__all__ = ["on_the_loop"]

# Characters of a query searched on the event loop: a question, or a paragraph.
_SHORT_QUERY = 2048
# Hits a search on the event loop may ask for (and each retriever four times as many).
_SHORT_K = 50
# Bytes of a search's body on the event loop: a query vector in JSON (384 numbers take
# about 8 KiB) and a filter of a few hundred conditions; a filter of thousands is long.
_SHORT_BODY = 32 * 1024


def on_the_loop(mem: Memory, args: dict[str, Any], body_bytes: int) -> bool:
    """Whether a search runs on the event loop rather than in a worker thread: one that
    runs no model (given a vector, or by text alone) over a store directory (its rows
    read from a local file, not from PostgreSQL) takes well under a millisecond, less
    than the hop to a thread and back costs on a busy machine (benches/bench_server.py).
    Nor is one that asks for much: a long query (BM25 reads each of its words), many
    hits or candidates, diversity (which compares the candidates pairwise), or a body
    past ``_SHORT_BODY`` (a filter of thousands of conditions); a client
    sending those would hold every other client's request. ``args``: ``Memory.search``'s,
    as the request gave them; ``body_bytes``: the request body's length."""
    query, k, candidates = args.get("query"), args.get("k", 5), args.get("candidates")
    return (
        body_bytes <= _SHORT_BODY
        and mem.path is not None
        and (args.get("query_embedding") is not None or args.get("mode") == "text")
        and isinstance(query, str)
        and len(query) <= _SHORT_QUERY
        and isinstance(k, int)
        and k <= _SHORT_K
        and (candidates is None or (isinstance(candidates, int) and candidates <= 4 * _SHORT_K))
        and not args.get("diversity")
    )
