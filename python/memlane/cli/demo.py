"""``memlane demo``: the memory demo (see :mod:`memlane.demo`)."""

from __future__ import annotations

import argparse

from memlane.cli._command import at_least, command

__all__: list[str] = []


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=at_least(1), default=3, help="results per search (default 3)")
    p.add_argument("--keep", metavar="DIR", help="build the store in DIR and keep it")


@command(
    "demo",
    "a store in a temporary folder: knowledge, agents' memories, searches, timings",
    arguments=_demo_arguments,
)
def demo(args: argparse.Namespace) -> int:
    from memlane.demo import run

    run(k=args.k, keep=args.keep)
    return 0
