"""Commands on a store's memories: add, search, list, get, forget, stats, export, import."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from memlane import times
from memlane.cli._command import (
    add_filter_arguments,
    add_scope_arguments,
    at_least,
    command,
    emit_json,
    filters_of,
    key_value,
    open_memory,
    parse_metadata,
    record_json,
    scope_of,
    stdin,
    unit_interval,
)
from memlane.errors import InvalidArgumentError
from memlane.printable import printable
from memlane.records import SCOPE_FIELDS, MemoryRecord, SearchHit

__all__: list[str] = []

_LIST_PAGE = 1000


def _label(record: MemoryRecord) -> str:
    scope = " ".join(f"{k.removesuffix('_id')}={v}" for k, v in record.scope.items())
    return printable(f"[{record.table}{' ' + scope if scope else ''}]")


def _flat(text: str) -> str:
    """A text on one line, as a terminal is to show it."""
    return printable(" ".join(text.split()))


def _explain_line(explain: dict[str, float | int | None]) -> str:
    def fmt(v: float | int | None) -> str:
        return "-" if v is None else str(v) if isinstance(v, int) else f"{v:.3f}"

    return "  ".join(f"{k}={fmt(v)}" for k, v in explain.items())


# -- add ------------------------------------------------------------------------------------


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "text",
        nargs="+",
        metavar="TEXT",
        help="the memory's text; several add several; - reads one per line from stdin",
    )
    p.add_argument("--table", default="memories", help="the table (default: memories)")
    p.add_argument("--type", default="semantic", help="the memory type (default: semantic)")
    p.add_argument("--importance", type=unit_interval, default=0.5, help="in [0, 1] (default 0.5)")
    p.add_argument("--evergreen", action="store_true", help="never decays")
    p.add_argument("--unique", action="store_true", help="skip or mark duplicates in its scope")
    p.add_argument(
        "--meta",
        action="append",
        type=key_value,
        metavar="KEY=VALUE",
        help="metadata (VALUE may be JSON)",
    )
    add_scope_arguments(p, "the memory's")


def _stdin_lines() -> list[str]:
    """The lines of standard input that are not blank. A line that does not decode is
    an ``InvalidArgumentError`` naming it, as a TEXT that is not UTF-8 is an error."""
    stream = stdin()
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream with no bytes under it
        return [line.rstrip("\n") for line in stream if line.strip()]
    encoding, errors = stream.encoding or "utf-8", stream.errors or "strict"
    lines: list[str] = []
    # The lines a text stream reads (universal newlines), decoded one at a time so that
    # an error can say which.
    for number, raw in enumerate(buffer.read().splitlines(), 1):
        try:
            line = raw.decode(encoding, errors)
        except UnicodeDecodeError as e:
            raise InvalidArgumentError(
                f"line {number} of standard input is not valid {encoding}: "
                f"{raw[e.start : e.end]!r} at byte {e.start + 1} ({e.reason})"
            ) from None
        if line.strip():
            lines.append(line)
    return lines


@command(
    "add",
    "add memories to a store",
    arguments=_add_arguments,
    store=True,
    json=True,
    creates=True,
)
def add(args: argparse.Namespace) -> int:
    metadata = parse_metadata(args.meta)
    common: dict[str, Any] = {
        "table": args.table,
        "type": args.type,
        "importance": args.importance,
        "evergreen": args.evergreen,
        "unique": args.unique,
        "metadata": metadata,
        **scope_of(args),
    }
    texts: list[str] = []
    for text in args.text:
        if text == "-":
            texts.extend(_stdin_lines())
        else:
            texts.append(text)
    for i, text in enumerate(texts):
        # As the store words it, before it is opened: a refused add makes no new store.
        if not text.strip():
            raise InvalidArgumentError(f"record {i}: text is empty or whitespace-only")
    with open_memory(args) as mem:
        records = mem.add_many([{"text": text, **common} for text in texts])
    if args.json:
        emit_json(
            {
                "records": [
                    {**record_json(r), "duplicate": r.duplicate, "duplicate_of": r.duplicate_of}
                    for r in records
                ]
            }
        )
        return 0
    for r in records:
        note = f"  (duplicate, {r.duplicate}, of {r.duplicate_of})" if r.duplicate else ""
        print(printable(f"{r.id}{note}"))
    return 0


# -- search ---------------------------------------------------------------------------------


def _search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY")
    p.add_argument("--k", type=at_least(1), default=5, help="how many results (default 5)")
    p.add_argument(
        "--mode", choices=("hybrid", "vector", "text"), default="hybrid", help="default hybrid"
    )
    p.add_argument("--table", help="only this table (default: all)")
    p.add_argument("--type", help="only this memory type")
    p.add_argument(
        "--knowledge",
        action="store_true",
        help="search ingested knowledge: shared fragments and --agent's own",
    )
    p.add_argument(
        "--threshold",
        type=float,
        help="drop results scoring below this (--knowledge: a minimum cosine, by default "
        "search_knowledge's measured cut-off)",
    )
    p.add_argument("--explain", action="store_true", help="show the signals behind each score")
    add_scope_arguments(p, "only this")
    add_filter_arguments(p)


def _hit_json(hit: SearchHit) -> dict[str, Any]:
    return {"score": hit.score, "explain": hit.explain, "record": record_json(hit.record)}


@command(
    "search",
    "hybrid, vector or text search over a store's memories or knowledge",
    arguments=_search_arguments,
    store=True,
    json=True,
)
def search(args: argparse.Namespace) -> int:
    with open_memory(args, embeds=args.mode != "text") as mem:
        started = time.perf_counter()
        if args.knowledge:
            scope = scope_of(args)
            other = sorted(set(scope) - {"agent_id"})
            if other:
                raise InvalidArgumentError(
                    f"--knowledge takes --agent only, not {', '.join(other)}"
                )
            hits = mem.search_knowledge(
                args.query,
                agent_id=scope.get("agent_id"),
                k=args.k,
                mode=args.mode,
                threshold="default" if args.threshold is None else args.threshold,
                explain=args.explain or args.json,
                filters=filters_of(args),
            )
        else:
            hits = mem.search(
                args.query,
                args.k,
                mode=args.mode,
                table=args.table,
                type=args.type,
                threshold=args.threshold,
                explain=args.explain or args.json,
                filters=filters_of(args),
                **scope_of(args),
            )
        seconds = time.perf_counter() - started
        hint = _no_result_hint(mem, args) if not hits else None
    if args.json:
        emit_json(
            {
                "query": args.query,
                "mode": args.mode,
                "k": args.k,
                "seconds": seconds,
                "hits": [_hit_json(h) for h in hits],
            }
        )
        return 0
    for rank, hit in enumerate(hits, 1):
        print(f"{rank:>2}. {hit.score:.3f}  {_label(hit.record)} {_flat(hit.record.text)}")
        print(f"    id {printable(hit.record.id)}")
        if args.explain and hit.explain is not None:
            print(f"    {_explain_line(hit.explain)}")
    print(f"{len(hits)} result(s) in {seconds * 1e3:.1f} ms")
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    return 0


def _no_result_hint(mem: Any, args: argparse.Namespace) -> str:
    """Why a search may have found nothing, and what to try."""
    if len(mem) == 0:
        return (
            f"the store {printable(mem.location)} is empty: add memories with 'memlane add' or "
            "documents with 'memlane ingest'"
        )
    if args.knowledge and mem.count("fragments") == 0:
        return "the store has no ingested knowledge: add documents with 'memlane ingest'"
    narrowing = [
        f"--{name}"
        for name, value in (
            ("threshold", args.threshold),
            ("table", args.table),
            ("type", args.type),
            ("where", args.where),
            ("filter", args.filter),
        )
        if value is not None
    ]
    narrowing += [f"--{f.removesuffix('_id')}" for f in scope_of(args)]
    if narrowing:
        return f"nothing matched; {', '.join(narrowing)} narrowed the search"
    return "nothing matched; try other words, or --mode hybrid or text"


# -- list -----------------------------------------------------------------------------------


def _list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", help="only this table (default: all)")
    p.add_argument("--type", help="only this memory type")
    p.add_argument("--limit", type=at_least(1), default=20, help="how many (default 20)")
    p.add_argument("--offset", type=at_least(0), default=0, help="skip this many first")
    p.add_argument("--oldest-first", action="store_true", help="oldest first (default newest)")
    add_scope_arguments(p, "only this")
    add_filter_arguments(p)


@command("list", "list memories, newest first", arguments=_list_arguments, store=True, json=True)
def list_(args: argparse.Namespace) -> int:
    filters = filters_of(args)
    with open_memory(args, embeds=False) as mem:
        records = mem.list(
            args.table,
            limit=args.limit,
            offset=args.offset,
            order="asc" if args.oldest_first else "desc",
            type=args.type,
            filters=filters,
            **scope_of(args),
        )
        total = mem.count(args.table, type=args.type, filters=filters, **scope_of(args))
    if args.json:
        emit_json({"total": total, "records": [record_json(r) for r in records]})
        return 0
    for r in records:
        when = times.stamp(r.created_at, "%Y-%m-%d %H:%M", tz=None)
        print(f"{printable(r.id)}  {when}  {_label(r)} {_flat(r.text)}")
    print(f"{len(records)} of {total} shown")
    if total == 0 and not records:
        print(
            "hint: nothing stored here matches"
            if filters is not None or scope_of(args) or args.table or args.type
            else "hint: the store is empty: add memories with 'memlane add'",
            file=sys.stderr,
        )
    return 0


# -- get ------------------------------------------------------------------------------------


def _get_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("ids", nargs="+", metavar="ID", help="ids of the memories to show")


@command("get", "show memories by id, every field", arguments=_get_arguments, store=True, json=True)
def get(args: argparse.Namespace) -> int:
    with open_memory(args, embeds=False) as mem:
        records = [mem.get(record_id) for record_id in args.ids]
    if args.json:
        emit_json({"records": [record_json(r) for r in records]})
        return 0
    for r in records:
        for key, value in record_json(r).items():
            print(f"{key:<17} {printable(value)}")
        print()
    return 0


# -- forget ---------------------------------------------------------------------------------


def _forget_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("ids", nargs="+", metavar="ID", help="ids of the memories to delete")


@command("forget", "delete memories by id", arguments=_forget_arguments, store=True, json=True)
def forget(args: argparse.Namespace) -> int:
    from memlane.errors import UnknownIdError

    ids = list(dict.fromkeys(args.ids))  # an id given twice is deleted once
    with open_memory(args, embeds=False) as mem:
        missing = [i for i in ids if i not in mem]
        if missing:
            raise UnknownIdError(f"no memory with id {', '.join(missing)} (nothing deleted)")
        # One transaction: the ids go together, or none does.
        mem.delete_all(filters={"id": {"$in": ids}})
    if args.json:
        emit_json({"deleted": ids})
    else:
        print(f"deleted {len(ids)} memor{'y' if len(ids) == 1 else 'ies'}")
    return 0


# -- stats ----------------------------------------------------------------------------------


def _disk(path: Path) -> dict[str, Any]:
    files: dict[str, int] = {}
    for f in sorted(path.rglob("*")):
        if f.is_file():
            files[f.relative_to(path).as_posix()] = f.stat().st_size
    index = sum(n for name, n in files.items() if name.startswith("index/"))
    database = sum(n for name, n in files.items() if name.startswith("memory.db"))
    return {
        "total_bytes": sum(files.values()),
        "database_bytes": database,
        "index_bytes": index,
        "files": files,
    }


def _size(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    raise AssertionError


@command(
    "stats",
    "counts per table and scope, queued upkeep jobs, disk use, embedder",
    store=True,
    json=True,
)
def stats(args: argparse.Namespace) -> int:
    tables: Counter[str] = Counter()
    scopes: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()
    with open_memory(args, embeds=False) as mem:
        embedder = mem.embedder
        total = len(mem)
        offset = 0
        while True:
            page = mem.list(limit=_LIST_PAGE, offset=offset, order="asc")
            for r in page:
                tables[r.table] += 1
                scopes[(r.table, tuple(r.scope.items()))] += 1
            offset += len(page)
            if len(page) < _LIST_PAGE:
                break
        store = mem.location
        # Upkeep accepted and not yet done (OrcBot's queued count): the durable jobs.
        queued = len(mem.jobs.items())
        disk = None if mem.path is None else _disk(mem.path)
    scope_rows = [
        {"table": table, **{f: dict(scope).get(f) for f in SCOPE_FIELDS}, "count": n}
        for (table, scope), n in sorted(scopes.items(), key=lambda kv: (kv[0][0], -kv[1]))
    ]
    if args.json:
        emit_json(
            {
                "store": store,
                "records": total,
                "tables": dict(sorted(tables.items())),
                "scopes": scope_rows,
                "queued": queued,
                "embedder": None
                if embedder is None
                else {"name": embedder.name, "dimension": embedder.dimension},
                "disk": disk,
            }
        )
        return 0
    print(f"store     {printable(store)}")
    if embedder is None:
        print("embedder  none (text only)")
    else:
        print(f"embedder  {printable(embedder.name)} ({embedder.dimension}-d)")
    print(f"records   {total}")
    print(f"queued    {queued} upkeep job(s)")
    for table, n in sorted(tables.items()):
        print(f"  {printable(table):<12} {n}")
    print("scopes")
    for row in scope_rows:
        who = " ".join(
            f"{f.removesuffix('_id')}={row[f]}" for f in SCOPE_FIELDS if row[f] is not None
        )
        print(
            f"  {row['count']:>8}  {printable(row['table']):<12} {printable(who) or '(no scope)'}"
        )
    if disk is None:
        print("disk      none here (the records are in PostgreSQL)")
        return 0
    print(
        f"disk      {_size(disk['total_bytes'])} (database {_size(disk['database_bytes'])}, "
        f"indexes {_size(disk['index_bytes'])})"
    )
    for name, n in disk["files"].items():
        if name.startswith("index/"):
            print(f"  {printable(name):<28} {_size(n)}")
    return 0


# -- export and import ----------------------------------------------------------------------


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="the JSON Lines file to write")
    p.add_argument("--no-embeddings", action="store_true", help="leave the vectors out")


@command(
    "export",
    "write every record to a JSON Lines file",
    arguments=_export_arguments,
    store=True,
    json=True,
)
def export(args: argparse.Namespace) -> int:
    # An export to standard output (/dev/stdout, piped) is the command's output: what
    # it says of the export goes to stderr, not among the lines.
    said = (
        contextlib.redirect_stdout(sys.stderr)
        if _is_stdout(args.file)
        else contextlib.nullcontext()
    )
    with open_memory(args, embeds=False) as mem:
        n = mem.export_jsonl(args.file, embeddings=not args.no_embeddings)
    with said:
        if args.json:
            emit_json({"exported": n, "file": args.file})
        else:
            print(f"exported {n} records to {printable(args.file)}")
    return 0


def _is_stdout(file: str) -> bool:
    """Whether ``file`` names what standard output writes to (asked before the export,
    which replaces a regular file)."""
    try:
        return os.path.samestat(os.stat(file), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):  # no such file yet; a stdout with no descriptor
        return False


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a JSON Lines file from 'memlane export'")
    p.add_argument(
        "--skip-existing", action="store_true", help="skip ids already stored (default: error)"
    )


@command(
    "import",
    "add the records of a JSON Lines export to a store",
    arguments=_import_arguments,
    store=True,
    json=True,
    creates=True,
)
def import_(args: argparse.Namespace) -> int:
    from memlane.errors import DuplicateIdError, NotFoundError

    # Before the store is opened: with --create, a misspelt FILE must not make a store.
    # A pipe or a device (/dev/stdin, a FIFO) is read as a file is.
    file = Path(args.file)
    if not file.exists():
        raise NotFoundError(f"no such file: {args.file}")
    if file.is_dir():
        raise InvalidArgumentError(f"{args.file} is a directory, not a JSONL file")
    with open_memory(args) as mem:
        try:
            n = mem.import_jsonl(args.file, on_conflict="skip" if args.skip_existing else "error")
        except DuplicateIdError as e:
            # The library's message names its argument; the CLI's user has a flag instead.
            raise DuplicateIdError(
                f"{e.where}: id {e.id!r} is already stored (--skip-existing skips stored ids)",
                id=e.id,
                where=e.where,
            ) from None
    if args.json:
        emit_json({"imported": n, "file": args.file})
    else:
        print(f"imported {n} records from {printable(args.file)}")
    return 0
