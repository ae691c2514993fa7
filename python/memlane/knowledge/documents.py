"""Knowledge records: the ``documents`` and ``fragments`` tables, read and removed
through ``MemoryStore``'s public API.

Knowledge is scoped by its agent alone: ingest writes a record with the store's
``default_scope`` and, for an agent's own knowledge, that ``agent_id`` (shared
knowledge has none of its own). But any caller may add a record to these tables with
any metadata, a caller scoped to a user or an agent too (a scoped server key), and
``shared`` metadata would make it every agent's knowledge. So every read, count and
delete of knowledge goes through ``knowledge_only``, which admits only records whose
scope is exactly what ingest writes: a record another scope wrote is never knowledge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane.errors import InvalidArgumentError, UnknownIdError, shown
from memlane.records import SCOPE_FIELDS

if TYPE_CHECKING:
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = [
    "DOCUMENTS",
    "FRAGMENTS",
    "check_document_id",
    "knowledge_documents",
    "knowledge_only",
    "list_all",
    "of_documents",
    "remove_documents",
]

DOCUMENTS = "documents"
FRAGMENTS = "fragments"
# Records per page when reading a whole table.
_LIST_PAGE = 1000


def knowledge_only(mem: MemoryStore, filters: Mapping[str, Any] | None) -> dict[str, Any]:
    """``filters`` narrowed to knowledge records as ingest writes them (see above).

    A read already asks for the store's ``default_scope``; this asks for every other
    scope field unset, and for ``agent_id`` (unless the default scope sets it) unset on
    shared knowledge and set on private. Each scope condition sits beside one on the
    ``shared`` metadata, whose postings the engine reads: the scope columns are checked
    on knowledge records alone, never by a scan of the store.
    """
    unset: dict[str, Any] = {
        f: None for f in SCOPE_FIELDS if f != "agent_id" and f not in mem.default_scope
    }
    shared, private = _shared_is(True), _shared_is(False)
    if "agent_id" not in mem.default_scope:  # else every read asks for it
        shared = {"$and": [shared, {"agent_id": None}]}
        private = {"$and": [private, {"agent_id": {"$ne": None}}]}
    exact = {**unset, "$or": [shared, private]}
    return exact if filters is None else {"$and": [exact, dict(filters)]}


def _shared_is(value: bool) -> dict[str, Any]:
    """``shared`` metadata that is ``value`` itself: a list matches a filter when one of
    its items does, so ``[true, false]`` would pass as shared and as private at once
    (another scope's record taken for shared knowledge by every agent's read)."""
    return {"$and": [{"shared": value}, {"shared": {"$ne": not value}}]}


def list_all(
    mem: MemoryStore,
    table: str,
    filters: Mapping[str, Any] | None = None,
    *,
    include_embedding: bool = False,
) -> list[MemoryRecord]:
    """Every knowledge record of ``table`` matching ``filters``, oldest first (page by
    page)."""
    flt = knowledge_only(mem, filters)
    out: list[MemoryRecord] = []
    while True:
        page = mem.list(
            table,
            limit=_LIST_PAGE,
            offset=len(out),
            order="asc",
            filters=flt,
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


def of_documents(ids: Sequence[str], owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The filter of the records of documents ``ids`` that ``owner`` (an owner's filter,
    ``pipeline.Owner.filter``) holds, or of any owner's when None.

    A delete on behalf of an owner takes this owner's filter: a document id is a hash of
    the owner and the path joined by ``|``, which an agent id or a path may hold too, so
    another owner's document may have the same id (``ids.py``). Its records then stay,
    and the new ones, whose ids are taken, are refused by the write that finds them.
    """
    by_id = {"document_id": {"$in": list(ids)}}
    return by_id if owner is None else {"$and": [dict(owner), by_id]}


def remove_documents(mem: MemoryStore, ids: Sequence[str], owner: Mapping[str, Any] | None) -> int:
    """Deletes the documents' records and their fragments, of ``owner`` (see
    ``of_documents``; None for a caller that named the documents itself), in one
    transaction (a reader never finds the fragments of a document that is gone);
    returns the fragments deleted."""
    if not ids:
        return 0
    flt = knowledge_only(mem, of_documents(ids, owner))
    documents = mem.count(DOCUMENTS, filters=flt)
    removed, _ = mem.replace([], [DOCUMENTS, FRAGMENTS], filters=flt)
    return removed - documents


def check_document_id(mem: MemoryStore, doc_id: str) -> None:
    if not isinstance(doc_id, str) or not doc_id:
        raise InvalidArgumentError(f"document_id must be a non-empty str, got {shown(doc_id)}")
    flt = knowledge_only(mem, {"document_id": doc_id})
    if not mem.count(DOCUMENTS, filters=flt) and not mem.count(FRAGMENTS, filters=flt):
        raise UnknownIdError(f"no knowledge document with id {doc_id!r}")
