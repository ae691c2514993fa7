"""``memlane ingest --watch``: the folder's knowledge kept in sync until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from memlane.cli._command import json_text, open_memory
from memlane.errors import InvalidArgumentError
from memlane.knowledge.report import IngestReport
from memlane.printable import printable

__all__ = ["changes", "watch"]


def changes(report: IngestReport) -> list[str]:
    """A batch's report as one line per document: what happened to it."""
    lines = [f"ingested {p}" for p in sorted(report.ingested)]
    lines += [f"replaced {p}" for p in sorted(report.replaced)]
    lines += [f"removed {p}" for p in sorted(report.pruned)]
    lines += [f"failed {p}: {why}" for p, why in sorted(report.failed.items())]
    return [printable(line) for line in lines]


def _printer(
    as_json: bool,
) -> tuple[Callable[[IngestReport], None], Callable[[BaseException], None]]:
    def on_report(report: IngestReport) -> None:
        if as_json:
            print(json_text(report.to_dict()), flush=True)
        else:
            for line in changes(report):
                print(line, flush=True)

    def on_error(error: BaseException) -> None:
        print(f"memlane: error: {printable(error)}", file=sys.stderr, flush=True)

    return on_report, on_error


def watch(args: argparse.Namespace) -> int:
    """Syncs the folder, prints the report, then each change, until interrupted (exit 0).

    The store stays open meanwhile (an embedded store admits one process at a time).
    """
    folder = Path(args.path)
    if not folder.is_dir():
        raise InvalidArgumentError(f"--watch needs a folder, got the file {folder}")
    on_report, on_error = _printer(args.json)
    with open_memory(args) as mem:
        handle = mem.watch(
            folder,
            agent_id=args.agent,
            shared=args.shared,
            debounce=args.debounce,
            on_report=on_report,
            on_error=on_error,
        )
        try:
            if args.json:
                print(json_text(handle.initial.to_dict()), flush=True)
            else:
                print(handle.initial, flush=True)
            print(
                f"memlane: watching {printable(folder)} (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )
            threading.Event().wait()  # until Ctrl-C (SIGINT) raises KeyboardInterrupt
        except KeyboardInterrupt:
            print("memlane: stopped watching", file=sys.stderr, flush=True)
        finally:
            handle.stop()
    return 0
