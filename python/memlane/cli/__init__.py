"""The ``memlane`` command line.

Every command lives in a module of this package and registers itself with
:func:`memlane.cli.command`; :func:`main` builds the parser from the registry.
Errors print one line (``memlane: error: ...``) on stderr and exit 1, usage
errors exit 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from memlane.cli._command import COMMANDS, Command, add_store_arguments, command, emit_json
from memlane.errors import MemlaneError

__all__ = ["COMMANDS", "COMMAND_MODULES", "Command", "build_parser", "command", "main"]

#: Modules whose import registers commands, in the order ``--help`` lists them.
COMMAND_MODULES = [
    "memlane.cli.demo",
    "memlane.cli.knowledge",
    "memlane.cli.store",
    "memlane.cli.upkeep",
    "memlane.cli.agent",
    "memlane.cli.serve",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _load() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name)


def build_parser() -> argparse.ArgumentParser:
    """The ``memlane`` parser with every registered command."""
    from memlane import __version__

    _load()
    parser = argparse.ArgumentParser(
        prog="memlane",
        description="memlane: persistent, searchable memory for AI agents.",
        epilog="Run 'memlane COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"memlane {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS.values():
        sub = commands.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.arguments is not None:
            cmd.arguments(sub)
        if cmd.store:
            add_store_arguments(sub)
        if cmd.json:
            sub.add_argument("--json", action="store_true", help="print one JSON document")
        # Also accepted after the command; SUPPRESS keeps a --debug given before it.
        sub.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        sub.set_defaults(_command=cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``memlane`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    cmd: Command = args._command
    try:
        return cmd.run(args)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); say nothing more on stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
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
            emit_json({"error": {"type": type(e).__name__, "message": message}})
        print(f"memlane: error: {message}", file=sys.stderr)
        return EXIT_ERROR
