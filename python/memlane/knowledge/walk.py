"""Finding the files of a knowledge folder, and the ones to leave out.

A walk visits a directory in name order and yields a ``Source`` per file
of a supported type. It leaves out, and reports with the reason: hidden files
and folders (names starting with ``.``), unsupported types, symbolic links
that lead outside the knowledge root (unless ``follow_outside``), broken links,
link loops, a second path to a file already found, and paths that are not regular
files (a FIFO, a socket, a device), which are never opened: opening a FIFO to read it
waits for a writer, forever, and a device such as ``/dev/zero`` never ends.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from memlane.knowledge.ids import normalise_path
from memlane.knowledge.loaders import Loader, loader_for

__all__ = ["Source", "inside", "relative_path", "walk"]


@dataclass(frozen=True, slots=True)
class Source:
    """One document to ingest: a file (``path``) or a text given as bytes (``data``)."""

    rel: str
    loader: Loader
    path: Path | None = None
    data: bytes | None = None

    def read(self) -> bytes:
        """The bytes of the text or the file; OSError if the file cannot be read, or is
        no longer a regular file (replaced since the walk): it is not read then."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        if not stat.S_ISREG(mode := self.path.stat().st_mode):
            raise OSError(errno.EINVAL, _not_regular(mode))
        # Replaced between the two looks, a FIFO opened without O_NONBLOCK would wait for
        # a writer; a regular file reads the same with it.
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as f:
            if not stat.S_ISREG(mode := os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, _not_regular(mode))
            return f.read()


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _not_regular(mode: int) -> str:
    """Why a path of ``mode`` (not a regular file) is left out: what it is."""
    kind = next((name for test, name in _KINDS if test(mode)), "")
    return f"not a regular file: {kind}" if kind else "not a regular file"


def inside(path: Path, root: Path) -> bool:
    """Whether the resolved ``path`` is ``root`` or below it (both resolved)."""
    return path == root or root in path.parents


def relative_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, lexically (links are not resolved), normalised."""
    return normalise_path(os.path.relpath(os.path.abspath(path), os.path.abspath(root)))


def _describe(e: OSError) -> str:
    return e.strerror or str(e)


def walk(
    target: Path,
    root: Path,
    *,
    follow_outside: bool,
    skipped: dict[str, str],
    same: dict[str, str] | None = None,
) -> list[Source]:
    """The supported files at ``target`` (a file or a folder) below ``root``.

    Paths are relative to ``root``; what is left out goes into ``skipped`` as
    relative path -> reason, and a second path to a file found also into ``same``, if
    given, as that path -> the file's path. ``target`` itself is taken as given (a
    hidden file named explicitly is ingested) but must lie inside ``root`` unless
    ``follow_outside``.
    """
    real_root = root.resolve()
    # (is a link, order found, rel, path, loader) per file, by real path: a file
    # reached twice is ingested once, under its own path rather than a link's.
    found: dict[Path, list[tuple[bool, int, str, Path, Loader]]] = {}
    counter = itertools.count()

    def add_file(path: Path, rel: str, link: bool) -> None:
        loader = loader_for(path)
        if loader is None:
            suffix = path.suffix.lower()
            skipped[rel] = f"unsupported type {suffix!r}" if suffix else "unsupported type"
            return
        paths = found.setdefault(path.resolve(), [])
        paths.append((link, next(counter), rel, path, loader))

    def visit(folder: Path, prefix: str, ancestors: frozenset[Path], linked: bool) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            skipped[prefix or "."] = f"cannot list the folder: {_describe(e)}"
            return
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            path = Path(entry.path)
            if entry.name.startswith("."):
                skipped[rel + ("/" if entry.is_dir() else "")] = "hidden"
                continue
            try:
                link = entry.is_symlink() or linked
                if entry.is_symlink():
                    real = path.resolve()
                    if not real.exists():
                        skipped[rel] = "broken symbolic link"
                        continue
                    if not follow_outside and not inside(real, real_root):
                        skipped[rel] = "symbolic link to outside the knowledge root"
                        continue
                if entry.is_dir():
                    real = path.resolve()
                    if real in ancestors:
                        skipped[rel + "/"] = "symbolic link loop"
                        continue
                    visit(path, rel + "/", ancestors | {real}, link)
                elif entry.is_file():
                    add_file(path, normalise_path(rel), link)
                else:
                    skipped[rel] = _not_regular(entry.stat().st_mode)
            except OSError as e:
                skipped[rel] = _describe(e)

    real_target = target.resolve()
    rel_target = relative_path(target, root)
    if not follow_outside and not inside(real_target, real_root):
        skipped[rel_target] = "outside the knowledge root"
        return []
    try:
        mode = target.stat().st_mode
    except OSError as e:
        skipped[rel_target] = _describe(e)
        return []
    if stat.S_ISDIR(mode):
        prefix = "" if rel_target == "." else rel_target + "/"
        visit(target, prefix, frozenset({real_target}), False)
    elif stat.S_ISREG(mode):
        add_file(target, rel_target, False)
    else:
        skipped[rel_target] = _not_regular(mode)
    sources: list[tuple[int, Source]] = []
    for paths in found.values():
        _, order, rel, path, loader = min(paths)
        sources.append((order, Source(rel, loader, path=path)))
        for _, _, other, _, _ in paths:
            if other != rel:
                skipped[other] = f"same file as {rel}"
                if same is not None:
                    same[other] = rel
    return [source for _, source in sorted(sources, key=lambda s: s[0])]
