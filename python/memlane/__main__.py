"""The `memlane` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memlane", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="embed the shipped sample texts, index and search them")
    demo.add_argument("--k", type=int, default=3, help="neighbours per question (default 3)")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from memlane.demo import run

        run(k=args.k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
