"""Knowledge records: the ``documents`` and ``fragments`` tables, read and removed
through ``MemoryStore``'s public API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane.errors import InvalidArgumentError, UnknownIdError, shown

if TYPE_CHECKING:
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = [
    "DOCUMENTS",
    "FRAGMENTS",
    "check_document_id",
    "knowledge_documents",
    "list_all",
    "remove_documents",
]

DOCUMENTS = "documents"
FRAGMENTS = "fragments"
# Records per page when reading a whole table.
_LIST_PAGE = 1000


def list_all(
    mem: MemoryStore,
    table: str,
    filters: Mapping[str, Any] | None = None,
    *,
    include_embedding: bool = False,
) -> list[MemoryRecord]:
    """Every record of ``table`` matching ``filters``, oldest first (page by page)."""
    out: list[MemoryRecord] = []
    while True:
        page = mem.list(
            table,
            limit=_LIST_PAGE,
            offset=len(out),
            order="asc",
            filters=filters,
            include_embedding=include_embedding,
        )
        out.extend(page)
        if len(page) < _LIST_PAGE:
            return out


def knowledge_documents(
    mem: MemoryStore, filters: Mapping[str, Any] | None = None
) -> list[MemoryRecord]:
    """Every document record matching ``filters``, oldest first."""
    return list_all(mem, DOCUMENTS, filters)


def remove_documents(mem: MemoryStore, ids: Sequence[str]) -> int:
    """Deletes the documents' records and their fragments in one transaction (a reader
    never finds the fragments of a document that is gone); returns the fragments deleted."""
    if not ids:
        return 0
    flt = {"document_id": {"$in": list(ids)}}
    documents = mem.count(DOCUMENTS, filters=flt)
    removed, _ = mem.replace([], [DOCUMENTS, FRAGMENTS], filters=flt)
    return removed - documents


def check_document_id(mem: MemoryStore, doc_id: str) -> None:
    if not isinstance(doc_id, str) or not doc_id:
        raise InvalidArgumentError(f"document_id must be a non-empty str, got {shown(doc_id)}")
    if not mem.count(DOCUMENTS, filters={"document_id": doc_id}) and not mem.count(
        FRAGMENTS, filters={"document_id": doc_id}
    ):
        raise UnknownIdError(f"no knowledge document with id {doc_id!r}")
