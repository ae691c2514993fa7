"""The record API's routes: add, add many, search, get, list, count, history,
supersede, update, delete, delete all, upkeep jobs and outcomes, and stats.

Each route makes one memlane call, in a worker thread (memlane's calls block; the engine
and the databases release the GIL; a short search runs on the event loop, see
``search``), so a request that fails stores nothing: the call is one transaction,
checked before it writes.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from memlane import coerce
from memlane.errors import ConflictError, InvalidArgumentError, UnknownIdError, shown
from memlane.memory import Memory
from memlane.records import MemoryRecord
from memlane.server.calls import (
    AsgiRoute,
    arguments,
    hit_json,
    json_object,
    query_arguments,
    read_body,
    read_json,
    record_json,
    send_json,
    version_json,
)
from memlane.server.errors import Refused
from memlane.server.keys import Caller
from memlane.server.search_load import on_the_loop
from memlane.store import OUTCOMES_KEPT, JobOutcome

__all__ = ["ROUTES"]

_T = TypeVar("_T")


def context(request: HTTPConnection, *, writes: bool = False) -> tuple[Memory, Caller]:
    """The store and what this request's key may do (401/403 otherwise)."""
    state = request.app.state
    caller = Caller.of(request.headers, state.keys)
    if writes:
        caller.writes()
    return state.memory, caller


#: Where a record's routes start; the id is the path's next segment.
ITEM = "/v1/memories/"
#: The scope's key for an id whose segment holds an encoded slash (see ``raw_id``).
_RAW_ID = "memlane.id"
#: A record's path segment that says the id is the query's ``id`` (see ``_query_id``).
QUERY_ID = "-"


def undecodable(scope: Scope) -> str | None:
    """Why a request's path or query string is refused, or None: a percent-escape that
    is no UTF-8 would be read as U+FFFD, and ``DELETE /v1/memories/%ff`` would delete the
    record whose id is that character, not one the client named."""
    for sent, what in ((scope.get("raw_path"), "path"), (scope.get("query_string"), "query")):
        if isinstance(sent, bytes) and (b"%" in sent or not sent.isascii()):
            try:
                unquote_to_bytes(sent).decode("utf-8")
            except UnicodeDecodeError:
                return f"the request's {what} is not UTF-8 once its %-escapes are decoded"
    return None


def raw_id(scope: Scope) -> None:
    """Routes a request for a record whose id holds a "/" by the path as sent. The router
    matches the decoded path, where ``/v1/memories/a%2Fb`` became ``/v1/memories/a/b``
    (no route) and ``/v1/memories/x%2Fhistory`` the history of ``x``. The path as sent
    is split at its slashes and each segment decoded alone, below the root path a
    mount or a proxy's prefix gave (whatever of it the client encoded); for a record's
    route whose id segment held an encoded slash, the path is routed with a stand-in for
    it and the id kept beside it, for ``path_id``."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes) or b"%2f" not in raw.lower():
        return
    root = scope.get("root_path", "") or ""
    try:
        segments = [unquote_to_bytes(s).decode("utf-8") for s in raw.decode("ascii").split("/")]
    except UnicodeError:
        return  # the router answers what it makes of it, as for any other path
    # The path as sent starts with the root path, or not at all where a proxy took
    # its prefix away before the server and named it in root_path.
    prefix = next((n for n in (1 + root.count("/"), 1) if "/".join(segments[:n]) in (root, "")), 0)
    below = segments[prefix:]  # the route's, below the root path
    if len(below) < 3 or below[:2] != ["v1", "memories"] or "/" not in below[2]:
        return
    scope[_RAW_ID] = below[2]
    scope["path"] = root + ITEM + "-" + "".join("/" + rest for rest in below[3:])


def path_id(request: HTTPConnection) -> str:
    """The id a record's route names: the path's segment, or the query's ``id`` where
    the segment is ``QUERY_ID`` (see ``_query_id``). An ``id`` in the query beside any
    other segment is refused, by every record route: one that read no query deleted
    ``a1`` for a ``DELETE /v1/memories/a1?id=..`` whose client meant ``..``."""
    if _query_id(request):
        named = request.query_params.getlist("id")
        if len(named) > 1:
            raise InvalidArgumentError("id is given twice")
        return named[0]
    given = request.scope.get(_RAW_ID)
    record_id = given if isinstance(given, str) else str(request.path_params["id"])
    if "id" in request.query_params:
        raise InvalidArgumentError(
            f"unknown parameter 'id': the path names the record ({record_id!r}); the query "
            f"names it only where the path has {QUERY_ID!r} in its place"
        )
    return record_id


def _query_id(request: HTTPConnection) -> bool:
    """Whether a record's route takes its id from the query string: its path has
    ``QUERY_ID`` in the id's place and the query an ``id``. A URL's path cannot carry
    every id: a browser reads a segment "." or ".." (written %2E too) as a step in the
    path before it sends it, so ``/v1/memories/./history`` asks for the history of the
    record ``history``. The record named ``-`` is still reached by its path, with no
    ``id`` in the query (``path_id`` refuses one beside any other segment)."""
    return (
        _RAW_ID not in request.scope
        and request.path_params.get("id") == QUERY_ID
        and "id" in request.query_params
    )


def _visible(mem: Memory, caller: Caller, record_id: str) -> MemoryRecord:
    """Record ``record_id``, if the caller's key may see it (else as if it were not)."""
    found = mem.get(record_id)
    if not caller.sees(found):
        raise UnknownIdError(f"no memory with id {record_id!r}")
    return found


async def add(request: Request) -> JSONResponse:
    """Add one memory (the arguments of Memory.add)."""
    mem, caller = context(request, writes=True)
    _own_query(request, "add")
    args = caller.bound(arguments(mem.add, await read_json(request)))
    found = await run_in_threadpool(lambda: mem.add(**args))
    return JSONResponse(_added(found), 201)


def _added(r: MemoryRecord) -> dict[str, Any]:
    return {**record_json(r), "duplicate": r.duplicate, "duplicate_of": r.duplicate_of}


async def add_many(request: Request) -> JSONResponse:
    """Add many memories in one transaction: {"items": [...]}, each the arguments of
    Memory.add; one bad item stores none."""
    mem, caller = context(request, writes=True)
    _own_query(request, "add_many")
    body = await read_json(request)
    items = arguments(mem.add_many, body, only={"items"})["items"]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidArgumentError("items must be a list of objects")
    bound = [caller.bound(arguments(mem.add, item)) for item in items]
    found = await run_in_threadpool(mem.add_many, bound)
    return JSONResponse({"records": [_added(r) for r in found]}, 201)


@AsgiRoute
async def search(scope: Scope, receive: Receive, send: Send) -> None:
    """Search: the arguments of Memory.search (query, k, mode, filters, explain, ...)."""
    connection = HTTPConnection(scope)
    mem, caller = context(connection)
    if scope.get("query_string"):  # parsed only when there is one: the call made most
        _own_query(connection, "search")
    body = await read_body(receive)
    given = json_object(body, exact=False)
    args = caller.bound(arguments(mem.search, given))
    if caller.read_only:
        # Recording the access is a write: the counts and times it changes rank every
        # key's searches (recency, access_count), and a key that may only read must not
        # move them.
        if args.get("track_access"):
            raise Refused(403, "Forbidden", "this API key is read-only: track_access=true writes")
        args["track_access"] = False
    if on_the_loop(mem, args, len(body)):
        hits = mem.search(**args)
    else:
        hits = await run_in_threadpool(lambda: mem.search(**args))
    await send_json(send, {"hits": [hit_json(h) for h in hits]})


async def get(request: Request) -> JSONResponse:
    """One memory by id (?include_embedding=true for its vector)."""
    mem, caller = context(request)
    record_id = path_id(request)
    own = ("id",) if _query_id(request) else ()
    args = query_arguments(request, mem.get, own=own, id=record_id)
    found = await run_in_threadpool(lambda: mem.get(**args))
    if not caller.sees(found):
        raise UnknownIdError(f"no memory with id {record_id!r}")
    return JSONResponse(record_json(found))


#: How many tables and scopes ``/v1/stats`` shows unless asked for another number: the
#: largest, so that its answer does not grow with a store of many scopes.
STATS_LIMIT = 100
#: Query parameters a route reads beside its Memory method's, by handler (the schema
#: shows them too).
OWN_QUERY: dict[str, dict[str, dict[str, Any]]] = {
    "upkeep": {
        "per_million_in": {"type": "number", "minimum": 0},
        "per_million_out": {"type": "number", "minimum": 0},
    },
    "stats": {
        "limit": {
            "type": "integer",
            "minimum": 0,
            "maximum": coerce.MAX_COUNT,
            "default": STATS_LIMIT,
            "description": "the tables and the scopes shown: the largest this many of each",
        },
    },
    **{
        handler: {
            "id": {
                "type": "string",
                "description": f"the record's id, where the path names {QUERY_ID!r} in its "
                "place: for an id a path cannot carry, such as '.' or '..'",
            }
        }
        for handler in ("get", "history", "supersede", "update", "delete")
    },
}


async def list_(request: Request) -> JSONResponse:
    """A page of memories, by creation time or ?sort= importance, access_count or
    last_accessed_at (ties newest first), with the total and the next page's offset (the
    query parameters of Memory.list; filters as JSON)."""
    mem, caller = context(request)
    args = caller.bound(query_arguments(request, mem.list))
    paging = ("limit", "offset", "order", "sort", "include_embedding")
    counted = {k: v for k, v in args.items() if k not in paging}

    def page() -> tuple[list[MemoryRecord], int]:
        return mem.list(**args), mem.count(**counted)

    found, total = await run_in_threadpool(page)
    offset = args.get("offset", 0)
    after = offset + len(found)
    return JSONResponse(
        {
            "records": [record_json(r) for r in found],
            "total": total,
            "offset": offset,
            "next_offset": after if after < total and found else None,
        }
    )


async def count(request: Request) -> JSONResponse:
    """How many memories (the query parameters of Memory.count)."""
    mem, caller = context(request)
    args = caller.bound(query_arguments(request, mem.count))
    return JSONResponse({"count": await run_in_threadpool(lambda: mem.count(**args))})


async def history(request: Request) -> JSONResponse:
    """Every version of a memory, oldest first."""
    mem, caller = context(request)
    record_id = path_id(request)
    _own_query(request, "history")
    # Each version checked: an id a deleted memory of another scope had, taken again,
    # has that memory's versions in its history too.
    versions = [v for v in await run_in_threadpool(mem.history, record_id) if caller.sees(v.record)]
    if not versions:
        raise UnknownIdError(f"no memory with id {record_id!r}")
    return JSONResponse({"versions": [version_json(v) for v in versions]})


async def supersede(request: Request) -> JSONResponse:
    """Replace a fact, keeping the old version (the arguments of Memory.supersede)."""
    mem, caller = context(request, writes=True)
    record_id = path_id(request)
    _own_query(request, "supersede")
    args = arguments(mem.supersede, {**await read_json(request), "id": record_id})
    found = await run_in_threadpool(
        _rewrite, mem, caller, record_id, lambda target: mem.supersede(**{**args, "id": target})
    )
    return JSONResponse(record_json(found), 201)


async def update(request: Request) -> JSONResponse:
    """Change fields of a memory (the arguments of Memory.update)."""
    mem, caller = context(request, writes=True)
    record_id = path_id(request)
    _own_query(request, "update")
    args = arguments(mem.update, {**await read_json(request), "id": record_id})
    found = await run_in_threadpool(
        _rewrite, mem, caller, record_id, lambda target: mem.update(**{**args, "id": target})
    )
    return JSONResponse(record_json(found))


#: How many times a scoped key's change is tried when another writer rewrote the record
#: between its read and its write (each try of an update embeds a new text again).
_REWRITE_TRIES = 16


def _rewrite(
    mem: Memory,
    caller: Caller,
    record_id: str,
    write: Callable[[MemoryRecord | str], MemoryRecord],
) -> MemoryRecord:
    """``write`` of record ``record_id`` as read, if the caller's key may see it. The
    record is passed as read, so the write's transaction refuses (``ConflictError``) any
    other version: the check of its scope holds at the write, not only at the read. By
    id, the write would take whatever the id holds then: the caller's record deleted
    meanwhile and another scope's added under its id, the other's.

    A record the caller no longer sees is answered as unknown (404, as a record of
    another scope always is: the conflict's message would describe the other's); one
    rewritten meanwhile, still the caller's and current, is written again over the
    version now (a request names a record by id: the version it finds). An unscoped
    key sees every record: its change is made by id, whatever the id holds then."""
    if not caller.scoped:
        return write(record_id)
    tries = 1
    while True:
        read = _visible(mem, caller, record_id)
        try:
            return write(read)
        except ConflictError:
            now = _visible(mem, caller, record_id)  # UnknownIdError: gone from its sight
            rewritten = now.valid_to is None and now.updated_at != read.updated_at
            if not rewritten or tries == _REWRITE_TRIES:
                raise
        tries += 1


async def delete(request: Request) -> JSONResponse:
    """Delete a memory (its history stays)."""
    mem, caller = context(request, writes=True)
    record_id = path_id(request)
    _own_query(request, "delete")
    if await read_json(request):
        raise InvalidArgumentError(
            "a delete takes no body: the path names the record (POST /v1/delete-all "
            "deletes by table, scope and filters)"
        )

    def run() -> None:
        if not caller.scoped:
            mem.delete(record_id)
            return
        # The version the key found, selected in the delete's transaction: a record of
        # another scope added under the id after a check made before would go. In the
        # record's own scope (the store's default_scope does not narrow it).
        for _ in range(_REWRITE_TRIES):
            read = _visible(mem, caller, record_id)  # 404 once gone from its sight
            found = [{"id": record_id}, {"updated_at": read.updated_at}]
            if mem.delete_all(read.table, filters={"$and": found}, **read.scope):
                return
        raise ConflictError(f"memory {record_id!r} was rewritten while it was deleted")

    await run_in_threadpool(run)
    return JSONResponse({"deleted": record_id})


async def delete_all(request: Request) -> JSONResponse:
    """Delete every memory of a table, scope and filters, in one transaction (the
    arguments of Memory.delete_all; an empty body deletes every record)."""
    mem, caller = context(request, writes=True)
    _own_query(request, "delete_all")  # ?dry_run=true, ignored, deleted them all
    args = caller.bound(arguments(mem.delete_all, await read_json(request)))
    return JSONResponse({"deleted": await run_in_threadpool(lambda: mem.delete_all(**args))})


async def jobs(request: Request) -> JSONResponse:
    """The store's upkeep jobs: work accepted and not yet done (Memory.jobs)."""
    mem, caller = context(request)
    caller.unscoped("the upkeep jobs")
    _own_query(request, "jobs")
    items = await run_in_threadpool(mem.jobs.items)
    return JSONResponse({"jobs": [{"key": k, "value": v} for k, v in items]})


async def upkeep(request: Request) -> JSONResponse:
    """The store's upkeep: the jobs waiting (their kind, when they were asked, and who
    holds them until when) and the newest outcomes of jobs done (model calls, tokens in
    and out, failures) with their totals, by kind and in all; ?per_million_in= and
    ?per_million_out= price the tokens (a cost per job and in all)."""
    mem, caller = context(request)
    caller.unscoped("the upkeep")
    prices = _prices(request)

    def gather() -> dict[str, Any]:
        waiting = [_waiting(k, v) for k, v in mem.jobs.items()]
        done = mem.jobs.outcomes()
        kinds: dict[str, list[JobOutcome]] = {}
        for o in done:
            kinds.setdefault(o.kind, []).append(o)
        return {
            "waiting": waiting,
            "done": [_outcome(o, prices) for o in reversed(done)],
            "totals": _totals(done, prices),
            "by_kind": {k: _totals(kinds[k], prices) for k in sorted(kinds)},
            "kept": OUTCOMES_KEPT,
        }

    return JSONResponse(await run_in_threadpool(gather))


def _own_query(request: HTTPConnection, handler: str) -> dict[str, str]:
    """The query string of a route that reads its own parameters (``OWN_QUERY``; none
    for a route not there), each given once: one it does not take is refused, as the
    others refuse theirs (one ignored did what it would have stopped:
    ``DELETE ...?dry_run=true`` deleted)."""
    takes = OWN_QUERY.get(handler, {})
    given: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name not in takes:
            raise InvalidArgumentError(
                f"unknown parameter {name!r}; this call takes "
                + (", ".join(takes) or "no query parameters")
            )
        if name in given:
            raise InvalidArgumentError(f"{name} is given twice")
        given[name] = value
    return given


def _prices(request: Request) -> tuple[float, float] | None:
    given = _own_query(request, "upkeep")
    if not given:
        return None
    prices = []
    for name in OWN_QUERY["upkeep"]:
        text = given.get(name, "0")
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise InvalidArgumentError(f"{name} must be a number >= 0, got {shown(text)}")
        prices.append(value)
    return prices[0], prices[1]


def _waiting(key: str, value: str) -> dict[str, Any]:
    """A job waiting, as far as its record tells (the agent layer writes it: a record
    that is not one of its jobs shows its key alone)."""
    try:
        job = json.loads(value)
    except (ValueError, RecursionError):
        job = None
    if not isinstance(job, dict):
        job = {}
    holder = job.get("holder")
    if not isinstance(holder, dict):
        holder = None
    return {
        "key": key,
        "kind": job.get("kind"),
        "asked_at": job.get("now"),
        "holder": None
        if holder is None
        else {"host": holder.get("host"), "pid": holder.get("pid"), "until": holder.get("until")},
    }


def _outcome(o: JobOutcome, prices: tuple[float, float] | None) -> dict[str, Any]:
    return {
        "kind": o.kind,
        "asked_at": o.asked_at,
        "done_at": o.done_at,
        "calls": o.calls,
        "tokens_in": o.tokens_in,
        "tokens_out": o.tokens_out,
        "failures": [{"what": what, "error": error} for what, error in o.failures],
        "cost": None if prices is None else o.cost(*prices),
    }


def _totals(done: list[JobOutcome], prices: tuple[float, float] | None) -> dict[str, Any]:
    return {
        "jobs": len(done),
        "failed": sum(o.failed for o in done),
        "calls": sum(o.calls for o in done),
        "tokens_in": sum(o.tokens_in for o in done),
        "tokens_out": sum(o.tokens_out for o in done),
        "cost": None if prices is None else sum(o.cost(*prices) for o in done),
    }


async def stats(request: Request) -> JSONResponse:
    """Counts by table and scope (the key's records only, for a scoped key), the
    embedder, the store's size on disk and how its index stands (Memory.stats).

    Of the tables and of the scopes, the largest 100 (?limit=N: N) are shown, in the
    order of Memory.scopes; table_count and scope_count say how many there are."""
    mem, caller = context(request)
    scope: dict[str, Any] = dict(caller.scope)
    given = _own_query(request, "stats").get("limit")
    limit = STATS_LIMIT if given is None else _limit(given)

    def gather() -> dict[str, Any]:
        scopes = mem.scopes(**scope)
        tables: dict[str, int] = {}
        for s in scopes:  # by table
            tables[s.table] = tables.get(s.table, 0) + s.count
        embedder = mem.embedder
        return {
            "store": None if caller.scoped else mem.location,
            "records": sum(tables.values()),
            "tables": dict(_largest(list(tables.items()), limit, lambda t: t[1])),
            "table_count": len(tables),
            # Only the scopes shown are made into dicts: for many scopes, more work
            # than the engine's counting them.
            "scopes": [s.to_dict() for s in _largest(scopes, limit, lambda s: s.count)],
            "scope_count": len(scopes),
            "embedder": None
            if embedder is None
            else {"name": embedder.name, "dimension": embedder.dimension},
            # The store's files (database and index snapshots); none for PostgreSQL.
            "disk_bytes": None if caller.scoped or mem.path is None else _disk(mem.path),
            # The index's state is the whole store's: not for a key limited to a scope.
            "index": None if caller.scoped else mem.stats().to_dict(),
        }

    return JSONResponse(await run_in_threadpool(gather))


def _largest(items: list[_T], n: int, size: Callable[[_T], int]) -> list[_T]:
    """The ``n`` items of the largest ``size``, in their order in ``items`` (of those
    equal, the first): a store of few tables and scopes shows them as it always did."""
    if len(items) <= n:
        return items
    keep = set(heapq.nlargest(n, range(len(items)), key=lambda i: size(items[i])))
    return [item for i, item in enumerate(items) if i in keep]


def _limit(text: str) -> int:
    """``?limit=``, a count (as ``Memory.list`` takes its own)."""
    try:
        value = int(text)
    except ValueError:  # not a number, or one of over 4,300 digits
        raise InvalidArgumentError(f"limit must be an int >= 0, got {shown(text)}") from None
    return coerce.count(value, "limit")


def _disk(folder: Path) -> int:
    total = 0
    for f in folder.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a snapshot replaced meanwhile
            if f.is_file():
                total += f.stat().st_size
    return total


#: (method, path, handler (of a Starlette request, or an ``AsgiRoute``), writes, the
#: Memory method whose parameters it takes, and where: "body", "query" or None).
Route = tuple[str, str, Callable[..., Any], bool, str | None, str | None]
ROUTES: list[Route] = [
    ("POST", "/v1/memories", add, True, "add", "body"),
    ("GET", "/v1/memories", list_, False, "list", "query"),
    ("POST", "/v1/memories/batch", add_many, True, "add_many", "body"),
    ("POST", "/v1/search", search, False, "search", "body"),
    ("GET", "/v1/count", count, False, "count", "query"),
    ("POST", "/v1/delete-all", delete_all, True, "delete_all", "body"),
    ("GET", "/v1/memories/{id}", get, False, "get", "query"),
    ("PATCH", "/v1/memories/{id}", update, True, "update", "body"),
    ("DELETE", "/v1/memories/{id}", delete, True, None, None),
    ("GET", "/v1/memories/{id}/history", history, False, None, None),
    ("POST", "/v1/memories/{id}/supersede", supersede, True, "supersede", "body"),
    ("GET", "/v1/jobs", jobs, False, None, None),
    ("GET", "/v1/upkeep", upkeep, False, None, None),
    ("GET", "/v1/stats", stats, False, None, None),
]
