"""``memlane prune``, ``memlane consolidate`` and ``memlane reflect``: a store's upkeep.

``prune`` wraps ``memlane.Memory.prune``; ``consolidate`` and ``reflect`` wrap
``memlane.agent.consolidate`` and ``memlane.agent.reflect`` with an LLM behind
an OpenAI-compatible ``/chat/completions`` endpoint (``memlane.OpenAIChat``), so a
cron job or an operator can run them without writing Python.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from memlane import json_depth
from memlane.cli._command import (
    add_scope_arguments,
    at_least,
    command,
    emit_json,
    open_memory,
    record_json,
    scope_of,
    stdin,
    unit_interval,
)
from memlane.errors import InvalidArgumentError, shown
from memlane.printable import printable

__all__: list[str] = []

#: The environment variable ``--api-key-env`` names by default.
API_KEY_ENV = "OPENAI_API_KEY"


def _flat(text: str, width: int = 100) -> str:
    """A text on one line, cut to ``width``, as a terminal is to show it."""
    line = " ".join(text.split())
    return printable(line if len(line) <= width else line[: width - 1] + "…")


# -- prune ------------------------------------------------------------------------------------


def _days(text: str) -> float:
    """An argparse type: a finite number of days >= 0 (any larger than every stored
    time's age prunes nothing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _prune_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-age-days",
        type=_days,
        metavar="DAYS",
        help="prune memories created more than DAYS ago (any age if not given)",
    )
    p.add_argument(
        "--keep-importance",
        type=unit_interval,
        metavar="X",
        help="keep memories whose importance is at least X",
    )
    p.add_argument(
        "--keep-accessed",
        type=at_least(0),
        metavar="N",
        help="keep memories retrieved more than N times",
    )
    tables = p.add_mutually_exclusive_group()
    tables.add_argument("--table", default="memories", help="the table (default: memories)")
    tables.add_argument(
        "--all-tables",
        action="store_true",
        help="every table, knowledge fragments and messages included",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    add_scope_arguments(p, "only memories of this")


@command(
    "prune",
    "delete old memories that are not important, used or evergreen (--dry-run to count)",
    arguments=_prune_arguments,
    store=True,
    json=True,
)
def prune(args: argparse.Namespace) -> int:
    if args.max_age_days is None and args.keep_importance is None and args.keep_accessed is None:
        # Checked before the store opens, in the command's words (not the method's).
        raise InvalidArgumentError(
            "give at least one of --max-age-days, --keep-importance, --keep-accessed"
        )
    with open_memory(args, embeds=False) as mem:
        records = mem.prune(
            max_age_days=args.max_age_days,
            keep_importance_at_least=args.keep_importance,
            keep_access_count_above=args.keep_accessed,
            table=None if args.all_tables else args.table,
            dry_run=args.dry_run,
            **scope_of(args),
        )
    if args.json:
        emit_json(
            {
                "dry_run": args.dry_run,
                "count": len(records),
                "records": [record_json(r) for r in records],
            }
        )
        return 0
    verb = "would prune" if args.dry_run else "pruned"
    print(f"{verb} {len(records)} memor{'y' if len(records) == 1 else 'ies'}")
    for r in records:
        print(f"  {printable(r.id)}  {_flat(r.text)}")
    return 0


# -- the LLM commands -------------------------------------------------------------------------


def _llm_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("the model (an OpenAI-compatible /chat/completions endpoint)")
    group.add_argument("--model", required=True, help="the model name sent with each request")
    group.add_argument(
        "--base-url",
        default="https://api.openai.com/v1",
        metavar="URL",
        help="the API root (default: %(default)s); e.g. http://localhost:11434/v1 for Ollama",
    )
    group.add_argument(
        "--api-key-env",
        default=API_KEY_ENV,
        metavar="NAME",
        help="the environment variable holding the API key (default: %(default)s; none "
        "needed for a local server)",
    )
    group.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="per request (60)"
    )
    add_scope_arguments(p, "the memories'")
    p.add_argument("--table", default="memories", help="the long-term table (default: memories)")


def _llm(args: argparse.Namespace) -> Any:
    from memlane.agent.llm import OpenAIChat

    if not args.base_url.startswith(("http://", "https://")):
        raise InvalidArgumentError(
            f"--base-url must start with http(s)://, got {shown(args.base_url)}"
        )
    key = os.environ.get(args.api_key_env)
    if key is None and args.api_key_env != API_KEY_ENV:
        raise InvalidArgumentError(f"--api-key-env {args.api_key_env}: that variable is not set")
    return OpenAIChat(args.model, base_url=args.base_url, api_key=key, timeout=args.timeout)


def _consolidate_arguments(p: argparse.ArgumentParser) -> None:
    _llm_arguments(p)
    p.add_argument(
        "--threshold",
        type=at_least(1),
        default=30,
        metavar="N",
        help="consolidate once the scope holds N short-term entries (default 30)",
    )
    p.add_argument(
        "--batch",
        type=at_least(1),
        default=20,
        metavar="N",
        help="the oldest N entries go into one summary (default 20)",
    )
    p.add_argument("--force", action="store_true", help="consolidate whatever there is")


@command(
    "consolidate",
    "summarise short-term entries into long-term memories with an LLM",
    arguments=_consolidate_arguments,
    store=True,
    json=True,
)
def consolidate(args: argparse.Namespace) -> int:
    from memlane.agent.consolidation import consolidate as run

    with _llm(args) as llm, open_memory(args) as mem:
        report = run(
            mem,
            llm,
            scope=scope_of(args) or None,
            threshold=args.threshold,
            batch=args.batch,
            table=args.table,
            force=args.force,
        )
    if args.json:
        emit_json(
            {
                "status": report.status,
                "pending_entries": report.pending_entries,
                "episodic": None if report.episodic is None else record_json(report.episodic),
                "semantic": [record_json(r) for r in report.semantic],
                "removed": report.removed,
                "error": report.error,
            }
        )
    elif report.status == "skipped":
        print(f"skipped: {report.pending_entries} short-term entries, below --threshold")
    elif report.status == "failed":
        print(
            f"memlane: consolidation failed (nothing removed): {printable(report.error)}",
            file=sys.stderr,
        )
    else:
        assert report.episodic is not None
        print(f"consolidated {len(report.removed)} entries into {printable(report.episodic.id)}")
        print(f"  {_flat(report.episodic.text)}")
        for r in report.semantic:
            print(f"  fact {printable(r.id)}  {_flat(r.text)}")
        print(f"{report.pending_entries} short-term entries left")
    return 1 if report.status == "failed" else 0


def _reflect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "conversation",
        metavar="FILE",
        help="the conversation: a JSON list of {role, content} messages, or plain text "
        "with one message a line; - reads stdin",
    )
    _llm_arguments(p)
    p.add_argument(
        "--k", type=at_least(1), default=10, help="memories shown to the model (default 10)"
    )


def _conversation(where: str) -> list[Any]:
    text = stdin().read() if where == "-" else Path(where).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            messages = json_depth.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(f"{where}: not a JSON list of messages ({e})") from None
        except RecursionError:
            raise InvalidArgumentError(f"{where}: its JSON is nested too deeply") from None
        except ValueError as e:  # an integer of more digits than Python reads
            raise InvalidArgumentError(f"{where}: a number in it cannot be read: {e}") from None
        if not all(isinstance(m, dict | str) for m in messages):
            raise InvalidArgumentError(f"{where}: each message must be an object or a string")
        return list(messages)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InvalidArgumentError(f"{where}: the conversation is empty")
    return lines


@command(
    "reflect",
    "let an LLM remember, update and forget memories after a conversation",
    arguments=_reflect_arguments,
    store=True,
    json=True,
)
def reflect(args: argparse.Namespace) -> int:
    from memlane.agent.reflection import reflect as run

    conversation = _conversation(args.conversation)
    with _llm(args) as llm, open_memory(args) as mem:
        report = run(
            mem, llm, conversation, scope=scope_of(args) or None, table=args.table, k=args.k
        )
    if args.json:
        emit_json(
            {
                "ok": report.ok,
                "added": [record_json(r) for r in report.added],
                "updated": [record_json(r) for r in report.updated],
                "forgotten": report.forgotten,
                "rejected": [[op, why] for op, why in report.rejected],
                "error": report.error,
            }
        )
    elif not report.ok:
        print(
            f"memlane: reflection failed (nothing changed): {printable(report.error)}",
            file=sys.stderr,
        )
    else:
        for r in report.added:
            print(f"remembered {printable(r.id)}  {_flat(r.text)}")
        for r in report.updated:
            print(f"updated {printable(r.id)}  {_flat(r.text)}")
        for rid in report.forgotten:
            print(f"forgot {printable(rid)}")
        for op, why in report.rejected:
            shown = op if isinstance(op, str) else json.dumps(op, ensure_ascii=False, default=str)
            print(f"rejected {_flat(shown)}: {printable(why)}")
    return 0 if report.ok else 1
