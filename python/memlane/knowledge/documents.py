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

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memlane import coerce
from memlane.errors import InvalidArgumentError, UnknownIdError, shown
from memlane.knowledge.ids import document_id
from memlane.records import SCOPE_FIELDS

if TYPE_CHECKING:
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = [
    "ALONE",
    "DOCUMENTS",
    "FRAGMENTS",
    "Held",
    "check_document_id",
    "choose_id",
    "chosen_meanwhile",
    "document_vector",
    "knowledge_documents",
    "knowledge_only",
    "list_all",
    "of_documents",
    "remove_documents",
    "replacing",
    "unstorable",
]

DOCUMENTS = "documents"
FRAGMENTS = "fragments"
# Metadata of a document (true, or absent) whose root is its file's folder, made by
# ingesting that file alone: a root never walked, which takes no folder (ingest.py).
ALONE = "alone"
# Records per page when reading a whole table.
_LIST_PAGE = 1000

FloatArray = npt.NDArray[np.float32]


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


class Held:
    """The owner's documents as read when an ingest starts: by id, and the id of the one
    made from each path under each root (``source``, ``root``), the first if several."""

    def __init__(self, records: Iterable[MemoryRecord] = ()) -> None:
        self.by_id: dict[str, MemoryRecord] = {}
        self.by_place: dict[tuple[str, str | None], str] = {}
        for r in records:
            self.by_id[r.id] = r
            root = r.metadata.get("root", _NO_ROOT)
            # Without "root" (no record of this code's) or a root no ingest writes, it is
            # no root's own document; choose_id judges it by its id alone.
            if root is None or isinstance(root, str):
                self.by_place.setdefault((str(r.metadata.get("source")), root), r.id)


_NO_ROOT = object()


def choose_id(rel: str, agent_id: str | None, shared: bool, root: str | None, held: Held) -> str:
    """The id of the owner's document at ``rel`` under ``root`` (the real path of the
    knowledge root; None for a text), given the owner's documents ``held``.

    The id of the document already made from ``rel`` under this root (or of this text
    name), if any, whichever id it got: a root whose document got the root-keyed id keeps
    it once the plain id's holder is gone. Else the plain id (``ids.document_id``) unless
    the document holding it is of another root that still has that file (or is a text, or
    a file's when this is a text): then the id keyed with the root too, so
    ``projA/README.md`` and ``projB/README.md`` are two documents. A document whose file
    is gone (its folder moved or deleted) is taken over, as before roots were told apart.
    """
    if (own := held.by_place.get((rel, root))) is not None:
        return own
    existing = held.by_id
    plain = document_id(rel, agent_id=agent_id, shared=shared)
    holder = existing.get(plain)
    if holder is None:
        return plain
    # Metadata without "root" is no record of this code's: taken as this root's.
    held_by = holder.metadata.get("root", root)
    if held_by == root:
        return plain
    rooted = document_id(rel, agent_id=agent_id, shared=shared, root=root or "")
    if rooted in existing or root is None or not isinstance(held_by, str):
        return rooted
    return rooted if os.path.exists(os.path.join(held_by, rel)) else plain


def replacing(
    mem: MemoryStore,
    expected: Mapping[str, MemoryRecord | None],
    owner: Mapping[str, Any],
) -> dict[str, Any]:
    """The filter of what a write of the owner's documents ``expected`` (the id of each
    -> its record as read when it was chosen, or None) replaces: their fragments, and
    each document's record if it is still of the root it was read with.

    The write then stores only what it chose for: another ingest of the owner that stored
    a document of another root with one of these ids meanwhile (two processes ingesting
    ``projA`` and ``projB``, both holding ``README.md``, each choosing the plain id) keeps
    it, and this write, finding the id taken, stores nothing, rather than replacing it.
    """
    mine: list[dict[str, Any]] = [
        {"table": FRAGMENTS, "document_id": {"$in": list(expected)}},
    ]
    for doc_id, old in expected.items():
        if old is not None:
            root = _root_of(old)
            was = {"$exists": False} if root is _NO_ROOT else root
            mine.append({"table": DOCUMENTS, "document_id": doc_id, "root": was})
    return knowledge_only(mem, {"$and": [dict(owner), {"$or": mine}]})


def chosen_meanwhile(held: Held, expected: Mapping[str, MemoryRecord | None]) -> list[str]:
    """The ids of ``expected`` (see ``replacing``) whose record in ``held``, read again,
    is not of the root it was read with, or is there though there was none."""
    moved = []
    for doc_id, old in expected.items():
        now = held.by_id.get(doc_id)
        if now is not None and (old is None or _root_of(now) != _root_of(old)):
            moved.append(doc_id)
    return moved


def _root_of(record: MemoryRecord) -> object:
    return record.metadata.get("root", _NO_ROOT)


def unstorable(items: list[dict[str, Any]]) -> str | None:
    """Why an add would refuse one of a document's records (the checks ``add`` makes
    of a record's text and metadata, the parts a file decides), or None."""
    # The document's record first: its text is the whole text, so a position in it
    # is a position in the document.
    for item in (items[-1], *items[:-1]):
        try:
            coerce.text(item["text"], "text")
            coerce.metadata(item["metadata"])
        except InvalidArgumentError as e:
            return f"cannot be stored: {e}"
    return None


def document_vector(fragments: FloatArray) -> FloatArray:
    """A document's vector: the mean of its fragments' unit vectors, made unit again.

    The model reads 256 tokens, so embedding a whole document would stand for its
    beginning only. The normalised mean is the direction with the highest summed
    cosine to all the fragments (each weighs alike, whatever its length), and it
    costs no model call: the fragments' vectors are at hand.
    """
    norms = np.linalg.norm(fragments, axis=1, keepdims=True)
    unit = fragments / np.where(norms > 0, norms, 1.0)
    centroid = unit.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    out: FloatArray = (centroid / norm if norm > 0 else unit[0]).astype(np.float32)
    return out
