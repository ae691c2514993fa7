"""Routes that move files: ingest (an uploaded file, or a path under the operator's
``--ingest-root``), and JSON Lines export and import, both streamed: an upload goes to a
temporary file as it arrives (within the upload limit), an export is sent in chunks from
the file ``export_jsonl`` wrote.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from memlane.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    MemlaneError,
    StorageError,
    shown,
)
from memlane.knowledge.report import IngestReport
from memlane.server.calls import arguments, query_once, read_json
from memlane.server.errors import Refused
from memlane.server.keys import Caller
from memlane.server.records import Route, context

__all__ = ["ROUTES"]

_CHUNK = 1 << 16
# An uploaded file's name: its loader is chosen by its extension, and it becomes the
# document's id, so it is one plain name.
_NAME = re.compile(r"[^/\\\x00]{1,255}")


def _plain_name(name: object) -> bool:
    """Whether ``name`` can be an uploaded file's name: one plain name, not hidden, that
    the file system takes (255 bytes at most, as UTF-8)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.startswith("."):
        return False
    try:
        return len(name.encode("utf-8")) <= 255
    except UnicodeEncodeError:  # a lone surrogate
        return False


@contextmanager
def _scratch(prefix: str) -> Iterator[Path]:
    """A temporary folder for an upload or an export, removed after; the server's disk
    full (or out of file handles) is a ``StorageError`` that names no place on it."""
    try:
        folder = tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True)
    except OSError as e:
        raise StorageError(f"the server has no room for the file: {e.strerror or e}") from None
    with folder as name:
        yield Path(name)


async def _save(request: Request, path: Path) -> int:
    """The request's body into ``path``, as it arrives; returns its size."""
    size = 0
    try:
        async with await anyio.open_file(path, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                await f.write(chunk)
    except OSError as e:
        raise StorageError(f"the server has no room for the upload: {e.strerror or e}") from None
    return size


_INGEST_OPTIONS = {"agent_id", "shared", "metadata"}


def _ingest_scope(caller: Caller, options: dict[str, Any]) -> dict[str, Any]:
    """Ingest's knowledge scope: a key scoped to an agent ingests as that agent; one
    scoped otherwise may not ingest (knowledge has only the agent's scope)."""
    if caller.scoped:
        if set(caller.scope) != {"agent_id"}:
            caller.unscoped("ingest (knowledge is scoped by agent_id alone)")
        if options.get("shared"):
            raise Refused(403, "Forbidden", "an agent's key may not ingest shared knowledge")
        return caller.bound(options)
    return options


async def ingest(request: Request) -> JSONResponse:
    """Ingest a document: the uploaded body (?name=FILE.md, and agent_id or shared=true)
    or, with a JSON body {"path": ...}, a file or folder under the server's ingest root."""
    mem, caller = context(request, writes=True)
    if request.headers.get("content-type", "").startswith("application/json"):
        if request.query_params:  # read from the body here: one in the query did nothing
            raise InvalidArgumentError(
                "an ingest by path takes its options in the JSON body, not the query"
            )
        body = await read_json(request)
        path = body.pop("path", None)
        options = _ingest_scope(caller, arguments(mem.ingest, body, only=_INGEST_OPTIONS))
        return JSONResponse(
            (await run_in_threadpool(_ingest_path, request, path, options)).to_dict()
        )
    given: dict[str, Any] = dict(query_once(request))
    name = given.pop("name", None)
    if not _plain_name(name):
        raise InvalidArgumentError(
            "give the file's name: ?name=notes.md (one plain name of at most 255 bytes)"
        )
    if "shared" in given:
        if given["shared"] not in ("true", "false"):
            raise InvalidArgumentError("shared: expected true or false")
        given["shared"] = given["shared"] == "true"
    options = _ingest_scope(caller, arguments(mem.ingest, given, only=_INGEST_OPTIONS))
    with _scratch("memlane-upload-") as folder:
        path = folder / name
        await _save(request, path)
        report = await run_in_threadpool(
            lambda: mem.ingest(path, root=folder, progress=False, **options)
        )
    return JSONResponse(report.to_dict())


def _ingest_path(request: Request, path: object, options: dict[str, Any]) -> IngestReport:
    root: Path | None = request.app.state.ingest_root
    if root is None:
        raise Refused(403, "Forbidden", "this server ingests no server-side path (--ingest-root)")
    if not isinstance(path, str) or not path or "\x00" in path:
        raise InvalidArgumentError("path must be a path under the server's ingest root")
    try:
        path.encode("utf-8")
        target = (root / path).resolve()
    except (UnicodeEncodeError, OSError, ValueError, RuntimeError):
        # RuntimeError: a symlink loop, as Python 3.11's resolve reports one. The
        # message names the path given, never the root's place on the server.
        raise InvalidArgumentError(f"path {shown(path)} is no file this server can read") from None
    if not target.is_relative_to(root):
        raise Refused(403, "Forbidden", f"{path!r} is outside the server's ingest root")
    mem = request.app.state.memory
    try:
        report: IngestReport = mem.ingest(target, root=root, progress=False, **options)
    except MemlaneError as e:
        # A file under the root is named as the client names it: relative to the root
        # (the root written as it is, or as repr() writes it inside a quoted path).
        places = {str(root), repr(str(root))[1:-1]}
        inside = re.compile("|".join(re.escape(p + os.sep) for p in places))
        whole = re.compile("|".join(re.escape(p) for p in places))
        _rewrite(e, lambda text: whole.sub("the ingest root", inside.sub("", text)))
        raise
    return report


async def export(request: Request) -> StreamingResponse:
    """Every record, then the history, as JSON Lines (?embeddings=false leaves the
    vectors out)."""
    mem, caller = context(request)
    caller.unscoped("export")
    given = query_once(request)
    flag = given.get("embeddings", "true")
    if flag not in ("true", "false") or set(given) - {"embeddings"}:
        raise InvalidArgumentError("export takes one parameter, embeddings=true or false")
    try:
        fd, name = tempfile.mkstemp(prefix="memlane-export-", suffix=".jsonl")
    except OSError as e:
        raise StorageError(f"the server has no room for the export: {e.strerror or e}") from None
    os.close(fd)
    path = Path(name)
    try:
        await run_in_threadpool(lambda: mem.export_jsonl(path, embeddings=flag == "true"))
    except BaseException as e:
        path.unlink(missing_ok=True)
        if isinstance(e, MemlaneError):
            _name_the_body(e, path, "the export")
        raise

    async def chunks() -> AsyncIterator[bytes]:
        async with await anyio.open_file(path, "rb") as f:
            while chunk := await f.read(_CHUNK):
                yield chunk

    return StreamingResponse(
        chunks(),
        media_type="application/x-ndjson",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


async def import_(request: Request) -> JSONResponse:
    """Add the records of an export (the body, JSON Lines; ?on_conflict=skip skips ids
    already stored). Every line is checked first: a bad one stores nothing."""
    mem, caller = context(request, writes=True)
    caller.unscoped("import")
    args = arguments(mem.import_jsonl, query_once(request), only={"on_conflict"})
    with _scratch("memlane-import-") as folder:
        path = folder / "import.jsonl"
        await _save(request, path)
        try:
            n = await run_in_threadpool(lambda: mem.import_jsonl(path, **args))
        except MemlaneError as e:
            _name_the_body(e, path)
            raise
    return JSONResponse({"imported": n}, 201)


def _name_the_body(error: MemlaneError, path: Path, what: str = "the body") -> None:
    """Rewrites ``error`` to name the lines of the request's body (``line 2 of the
    body``) where the import named those of the temporary file holding it (or the export
    where it named the file it wrote): the client has no use for the server's path, and
    is not to learn it."""
    line = re.compile(re.escape(str(path)) + r":(\d+)")
    named = re.compile(re.escape(repr(str(path))) + "|" + re.escape(str(path)))

    _rewrite(error, lambda text: named.sub(what, line.sub(rf"line \1 of {what}", text)))


def _rewrite(error: MemlaneError, change: Callable[[str], str]) -> None:
    """``error`` with ``change`` made to each of its texts."""
    error.args = tuple(change(a) if isinstance(a, str) else a for a in error.args)
    if isinstance(error, DuplicateIdError):
        error.where = change(error.where)


ROUTES: list[Route] = [
    ("POST", "/v1/ingest", ingest, True, None, None),
    ("GET", "/v1/export", export, False, None, None),
    ("POST", "/v1/import", import_, True, None, None),
]
