"""The command registry and the helpers every command shares.

A command is one function registered with :func:`command`::

    @command("hello", "say hello to a store", arguments=lambda p: p.add_argument("name"))
    def hello(args: argparse.Namespace) -> int:
        with open_store(args) as mem:
            ...
        return 0

Commands are listed by ``memlane --help`` in the order their modules register
them; a new module is added to ``COMMAND_MODULES`` in :mod:`memlane.cli`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlane.errors import EmbedderMismatchError, InvalidArgumentError, NotFoundError
from memlane.records import SCOPE_FIELDS

if TYPE_CHECKING:
    from memlane.embeddings import Embedder
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "COMMANDS",
    "Command",
    "add_scope_arguments",
    "command",
    "emit_json",
    "make_embedder",
    "open_store",
    "record_json",
    "scope_of",
]

Run = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], Any]

#: The environment variable ``--store`` defaults to.
STORE_ENV = "MEMLANE_STORE"
#: The environment variable ``--cache-dir`` defaults to.
CACHE_ENV = "MEMLANE_CACHE_DIR"
#: Scope options: ``--agent`` sets ``agent_id`` and so on.
SCOPE_OPTIONS = {
    "agent_id": "agent",
    "user_id": "user",
    "room_id": "room",
    "world_id": "world",
    "session_id": "session",
    "namespace": "namespace",
}
assert set(SCOPE_OPTIONS) == set(SCOPE_FIELDS)


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand: its name, one-line help, argument setup and body."""

    name: str
    help: str
    run: Run
    arguments: Configure | None = None
    store: bool = False
    json: bool = False


#: Registered commands by name, in registration order.
COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    help: str,
    *,
    arguments: Configure | None = None,
    store: bool = False,
    json: bool = False,
) -> Callable[[Run], Run]:
    """Registers the decorated function as ``memlane NAME``.

    ``arguments`` adds the command's own arguments to its parser; ``store``
    adds ``--store DIR`` and the embedder option; ``json`` adds ``--json``.
    The function returns the exit code.
    """

    def register(run: Run) -> Run:
        if name in COMMANDS:
            raise ValueError(f"memlane command {name!r} is registered twice")
        COMMANDS[name] = Command(name, help, run, arguments, store, json)
        return run

    return register


def add_scope_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--agent``, ``--user``, ``--room``, ``--world``, ``--session``, ``--namespace``."""
    group = parser.add_argument_group("scope")
    for field, option in SCOPE_OPTIONS.items():
        group.add_argument(f"--{option}", dest=field, metavar="NAME", help=f"{what} {field}")


def scope_of(args: argparse.Namespace) -> dict[str, Any]:
    """The scope fields given on the command line."""
    return {f: v for f in SCOPE_FIELDS if (v := getattr(args, f, None)) is not None}


def make_embedder(choice: str) -> Embedder | None:
    """The embedder named by ``--embedder``: ``onnx`` (the default model) or ``none``."""
    if choice == "none":
        return None
    from memlane.embeddings.lazy import default_embedder

    return default_embedder()


@contextmanager
def open_store(args: argparse.Namespace, *, create: bool = False) -> Iterator[Memory]:
    """Opens ``--store``; a missing store is an error unless ``create``."""
    from memlane.memory import Memory
    from memlane.storage import is_postgres_url

    # A PostgreSQL store's schema is created by its first open, like a new directory's.
    target: str | Path = args.store if is_postgres_url(args.store) else Path(args.store)
    if not create and isinstance(target, Path) and not (target / "memory.db").is_file():
        raise NotFoundError(f"no memlane store at {target}")
    options: dict[str, Any] = {}
    if args.cache_dir is not None:
        if not isinstance(target, str):
            raise InvalidArgumentError("--cache-dir is for PostgreSQL stores")
        options["cache_dir"] = Path(args.cache_dir)
    try:
        mem = Memory(target, make_embedder(args.embedder), **options)
    except EmbedderMismatchError as e:
        raise EmbedderMismatchError(
            f"{e}; on the command line, --embedder none opens a text-only store"
        ) from e
    try:
        yield mem
    finally:
        mem.close()


def record_json(record: MemoryRecord) -> dict[str, Any]:
    """A record as ``--json`` prints it: every stored field but the embedding."""
    return record.to_dict(embedding=False)


def emit_json(value: object) -> None:
    """Prints one JSON document on stdout."""
    json.dump(value, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get(STORE_ENV)
    parser.add_argument(
        "--store",
        metavar="DIR",
        default=default,
        required=default is None,
        help=f"the store directory, or a postgresql:// URL (default: ${STORE_ENV})",
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=os.environ.get(CACHE_ENV),
        help=(
            "PostgreSQL stores: a folder for index snapshots, so an open replays only "
            f"the changes since the last one (default: ${CACHE_ENV}, else none)"
        ),
    )
    parser.add_argument(
        "--embedder",
        choices=("onnx", "none"),
        default="onnx",
        help="onnx: the built-in all-MiniLM-L6-v2 (default); none: a text-only store",
    )


def parse_metadata(pairs: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value that parses as JSON is taken as JSON."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"--meta takes KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out
