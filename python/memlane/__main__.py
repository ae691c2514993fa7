"""``python -m memlane``: the command line (see ``memlane.cli``)."""

from memlane.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
