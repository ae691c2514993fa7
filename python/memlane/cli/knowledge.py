"""``memlane ingest``: documents into searchable knowledge."""

from __future__ import annotations

import argparse

from memlane.cli._command import command, emit_json, open_memory
from memlane.errors import shown
from memlane.knowledge.watch import DEBOUNCE

__all__: list[str] = []


def _ingest_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="a file, or a folder ingested with its subfolders")
    owner = p.add_mutually_exclusive_group(required=True)
    owner.add_argument("--agent", metavar="NAME", help="the agent whose own knowledge this is")
    owner.add_argument("--shared", action="store_true", help="knowledge every agent may read")
    p.add_argument(
        "--prune", action="store_true", help="remove documents under PATH whose file is gone"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--watch",
        action="store_true",
        help="then keep the folder in sync as files appear, change and vanish, until "
        "interrupted (Ctrl-C); implies --prune. With --json, one JSON report a line",
    )
    p.add_argument(
        "--debounce",
        type=seconds,
        default=DEBOUNCE,
        metavar="SECONDS",
        help=f"--watch: quiet time after a burst of file events (default {DEBOUNCE})",
    )


def seconds(text: str) -> float:
    """An argparse type: a number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    if not 0.0 <= value <= 3600.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 3600], got {text}")
    return value


@command(
    "ingest",
    "ingest a file or folder of documents as knowledge (progress bar and report)",
    arguments=_ingest_arguments,
    store=True,
    json=True,
    creates=True,
)
def ingest(args: argparse.Namespace) -> int:
    from pathlib import Path

    from memlane.errors import NotFoundError

    if not Path(args.path).exists():
        raise NotFoundError(f"no such file or folder: {args.path}")
    if args.watch:
        from memlane.cli.watching import watch

        return watch(args)
    with open_memory(args) as mem:
        report = mem.ingest(
            args.path,
            agent_id=args.agent,
            shared=args.shared,
            prune_missing=args.prune,
            progress=not args.no_progress,
        )
    if args.json:
        emit_json(report.to_dict())
    else:
        print(report)
    return 0 if report.ok else 1
