"""The ``memlane`` command line.

Every command lives in a module of this package and registers itself with
``memlane.cli.command``; ``main`` builds the parser from the registry.
A command that opens a store takes it first (``memlane stats STORE``), or from
``--store`` or ``$MEMLANE_STORE`` in its place. Errors print one line
(``memlane: error: ...``) on stderr and exit 1, usage errors exit 2; a warning
prints one line (``note: ...``); ``--debug`` shows the traceback, and where a
warning came from, instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn, TextIO

from memlane.cli._command import (
    COMMANDS,
    STORE_ENV,
    Command,
    add_store_argument,
    add_store_options,
    command,
    emit_json,
)
from memlane.embeddings import TextTruncatedWarning
from memlane.errors import MemlaneError
from memlane.printable import printable

__all__ = ["COMMANDS", "COMMAND_MODULES", "Command", "build_parser", "command", "main", "parse"]

#: Modules whose import registers commands, in the order ``--help`` lists them.
COMMAND_MODULES = [
    "memlane.cli.demo",
    "memlane.cli.knowledge",
    "memlane.cli.records",
    "memlane.cli.upkeep",
    "memlane.cli.agent",
    "memlane.cli.serve",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _load() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name)


def build_parser(
    *,
    store_argument: bool = True,
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    """The ``memlane`` parser with every registered command.

    With ``store_argument=False``, the commands that open a store have no STORE
    argument: the reading of a command line that names its store with ``--store`` or
    ``$MEMLANE_STORE`` (``parse`` tries both).
    """
    from memlane import __version__

    _load()
    parser = parser_class(
        prog="memlane",
        description="memlane: persistent, searchable memory for AI agents.",
        epilog="A command that opens a store takes it first: memlane COMMAND STORE ... "
        f"(or --store STORE, or ${STORE_ENV}, in its place). "
        "Run 'memlane COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"memlane {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS.values():
        sub = commands.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.store and store_argument:
            add_store_argument(sub)  # first: before the command's own arguments
        if cmd.arguments is not None:
            cmd.arguments(sub)
        if cmd.store:
            add_store_options(sub, creates=cmd.creates)
        if cmd.json:
            sub.add_argument("--json", action="store_true", help="print one JSON document")
        # Also accepted after the command; SUPPRESS keeps a --debug given before it.
        sub.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        sub.set_defaults(_command=cmd, _parser=sub)
    return parser


class _Rejected(Exception):
    """A reading of the command line that does not parse, and why."""

    def __init__(
        self, parser: argparse.ArgumentParser, message: str, *, parsed: bool = False
    ) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message
        self.parsed = parsed  # the reading parsed, and what it read is refused


class _Trial(argparse.ArgumentParser):
    """A parser that raises ``_Rejected`` where argparse would print and exit."""

    def error(self, message: str) -> NoReturn:
        raise _Rejected(self, message)


def _read(argv: list[str], store_argument: bool) -> argparse.Namespace:
    args = build_parser(store_argument=store_argument, parser_class=_Trial).parse_args(argv)
    cmd: Command = args._command
    if cmd.store:
        given = args.store if store_argument else None
        if given is not None and args.store_option is not None:
            raise _Rejected(
                args._parser,
                f"the store is named twice: STORE {given!r} and --store {args.store_option!r}",
                parsed=True,
            )
        args.store = given or args.store_option or os.environ.get(STORE_ENV) or None
        if args.store is None:
            raise _Rejected(args._parser, "the following arguments are required: STORE")
    return args


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``argv`` parsed, with ``args.store`` the store it names (for a command that opens one).

    The store is the first argument (``memlane search STORE QUERY``), unless ``--store``
    or ``$MEMLANE_STORE`` names it: then every argument is the command's own. Both
    readings are tried, the one without STORE first, so that with ``$MEMLANE_STORE`` set
    ``memlane add TEXT...`` adds every TEXT, while ``memlane stats STORE`` still reads the
    store it is given. A usage error prints as argparse prints it and raises
    ``SystemExit(2)``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # Help describes the form with STORE.
    readings = [True] if {"-h", "--help"} & set(argv) else [False, True]
    rejected: list[_Rejected] = []
    for store_argument in readings:
        try:
            return _read(argv, store_argument)
        except _Rejected as e:
            rejected.append(e)
    # Neither reading parses: say why in the one the user meant: the one that parsed, else
    # the one without STORE if they named the store elsewhere.
    elsewhere = bool(os.environ.get(STORE_ENV)) or any(
        a == "--store" or a.startswith("--store=") for a in argv
    )
    why = next((e for e in rejected if e.parsed), rejected[0] if elsewhere else rejected[-1])
    argparse.ArgumentParser.error(why.parser, why.message)


def _note(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning as the command line shows it: one line, ``note: ...``, on stderr."""
    if isinstance(message, TextTruncatedWarning):
        # The library's wording names its arguments; on the command line, what happened.
        limit = f" ({message.max_length} tokens)" if message.max_length else ""
        text = (
            f"{message.count} text(s) were longer than the embedding model reads{limit}: "
            "their vectors stand for their beginning (text search sees all of them)"
        )
    else:
        text = " ".join(str(message).split()).removeprefix("memlane: ") or category.__name__
    print(f"note: {text}", file=sys.stderr, flush=True)


@contextmanager
def _notes(debug: bool) -> Iterator[None]:
    """Warnings print as notes while a command runs (``--debug``: as Python prints them)."""
    with warnings.catch_warnings():
        if not debug:
            warnings.showwarning = _note
        yield


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a service manager's stop, ``kill``) taken as Ctrl-C is, while a command
    runs: by SIGINT's handler of the moment, which a write in progress holds back until
    its outcome is settled (``storage/interrupts.py``); an export removes its temporary
    file, and the command says it was interrupted. Left alone where SIGTERM already has a
    handler, or off the main thread (where none can be set)."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL or threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: FrameType | None) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):
            raise KeyboardInterrupt
        handler(signal.SIGINT, frame)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _reader_gone() -> None:
    """The reader of stdout went away (e.g. ``| head``): nothing more is written there,
    and Python's flush at exit finds nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``memlane`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    for name in ("stdout", "stderr"):
        # Started with it closed (`>&-`), Python sets it None and every print raises:
        # what it would say goes nowhere instead.
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
    try:
        args = parse(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    cmd: Command = args._command
    try:
        with _notes(args.debug), _terminate_as_interrupt():
            return cmd.run(args)
    except BrokenPipeError:
        _reader_gone()
        return EXIT_ERROR
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("memlane: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        if args.debug:
            raise
        message = str(e) or type(e).__name__
        if not isinstance(e, MemlaneError | OSError):
            message = f"{type(e).__name__}: {message} (run with --debug for the traceback)"
        if getattr(args, "json", False):
            try:
                emit_json({"error": {"type": type(e).__name__, "message": message}})
            except BrokenPipeError:
                _reader_gone()
        # Escaped as the terminal is to show it (a message may quote a file's name or a
        # stored text); the JSON document above keeps it as it is.
        print(f"memlane: error: {printable(message)}", file=sys.stderr)
        return EXIT_ERROR
