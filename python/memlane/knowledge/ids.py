"""Deterministic ids of knowledge documents and their fragments.

A document's id is a version 5 UUID over a fixed namespace of
``"{agent}|{shared}|{path}"``: the agent (empty for shared knowledge, which
belongs to every agent), the shared flag and the document's path relative to
its knowledge root, normalised (POSIX separators, no ``.`` parts, Unicode NFC).
The same file under the same root always gets the same id, on any machine.
Two roots holding the same path (two projects' ``README.md``) would share that id: the
first document made keeps it, and the other root's gets an id keyed with its root as
well (``document_id(..., root=...)``, chosen by ``documents.choose_id``), so neither
replaces the other.
A fragment's id is ``f"{document_id}-chunk-{position}"``.

The key is ambiguous where an agent id or a path holds ``|``, so two owners may get
one id. It stays as it is, since every stored document has its id from it: an ingest
deletes only its own owner's records (``documents.of_documents``), and the write that
finds an id taken by another owner's record stores nothing.
"""

from __future__ import annotations

import json
import posixpath
import unicodedata
import uuid
from pathlib import PurePath

from memlane.errors import InvalidArgumentError

__all__ = ["NAMESPACE", "document_id", "fragment_id", "normalise_path"]

#: uuid5(NAMESPACE_URL, "memlane:knowledge"); fixed forever, or every id changes.
NAMESPACE = uuid.UUID("755fd2f6-34a7-5501-a5d0-1da33ca4cf79")


def normalise_path(path: str | PurePath) -> str:
    """A relative path as ids see it: ``"notes/deploy.md"`` for ``"./notes\\deploy.md"``.

    Backslashes count as separators (a path written on Windows gets the same
    id), ``.`` parts and repeated separators go, and the text is NFC so that a
    name typed on macOS (NFD) matches. ``..`` is kept where it cannot be
    resolved away, and an absolute path stays absolute.
    """
    text = path.as_posix() if isinstance(path, PurePath) else str(path)
    text = unicodedata.normalize("NFC", text.replace("\\", "/"))
    if not text.strip():
        raise InvalidArgumentError("a document path must not be empty")
    norm = posixpath.normpath(text)
    return norm[1:] if norm.startswith("//") else norm


def document_id(
    path: str | PurePath, *, agent_id: str | None, shared: bool, root: str | None = None
) -> str:
    """The id of the document at ``path`` (relative to its knowledge root).

    Shared documents ignore ``agent_id``: every agent that ingests the same
    shared file gets the same document. With ``root`` (the real path of the knowledge
    root, ``""`` for a text) the id is keyed with it too: the id a document gets when
    the plain one is held by the document of the same path under another root
    (``documents.choose_id``).
    """
    agent = "" if shared or agent_id is None else agent_id
    key = f"{agent}|{bool(shared)}|{normalise_path(path)}"
    if root is not None:
        key = json.dumps(["root", key, root])
    return str(uuid.uuid5(NAMESPACE, key))


def fragment_id(document: str, position: int) -> str:
    """The id of fragment ``position`` (from 0) of a document."""
    return f"{document}-chunk-{position}"
