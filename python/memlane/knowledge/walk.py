"""Finding the files of a knowledge folder, and the ones to leave out.

A walk visits a directory in name order and yields a :class:`Source` per file
of a supported type. It leaves out, and reports with the reason: hidden files
and folders (names starting with ``.``), unsupported types, symbolic links
that lead outside the knowledge root (unless ``follow_outside``), broken links,
link loops, and a second path to a file already found.
"""

from __future__ import annotations

import itertools
import os
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
        if self.data is not None:
            return self.data
        assert self.path is not None
        return self.path.read_bytes()


def inside(path: Path, root: Path) -> bool:
    """Whether the resolved ``path`` is ``root`` or below it (both resolved)."""
    return path == root or root in path.parents


def relative_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, lexically (links are not resolved), normalised."""
    return normalise_path(os.path.relpath(os.path.abspath(path), os.path.abspath(root)))


def _describe(e: OSError) -> str:
    return e.strerror or str(e)


def walk(
    target: Path, root: Path, *, follow_outside: bool, skipped: dict[str, str]
) -> list[Source]:
    """The supported files at ``target`` (a file or a folder) below ``root``.

    Paths are relative to ``root``; what is left out goes into ``skipped`` as
    relative path -> reason. ``target`` itself is taken as given (a hidden
    file named explicitly is ingested) but must lie inside ``root`` unless
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
                    skipped[rel] = "not a regular file"
            except OSError as e:
                skipped[rel] = _describe(e)

    real_target = target.resolve()
    rel_target = relative_path(target, root)
    if not follow_outside and not inside(real_target, real_root):
        skipped[rel_target] = "outside the knowledge root"
        return []
    if target.is_dir():
        prefix = "" if rel_target == "." else rel_target + "/"
        visit(target, prefix, frozenset({real_target}), False)
    else:
        add_file(target, rel_target, False)
    sources: list[tuple[int, Source]] = []
    for paths in found.values():
        _, order, rel, path, loader = min(paths)
        sources.append((order, Source(rel, loader, path=path)))
        for _, _, other, _, _ in paths:
            if other != rel:
                skipped[other] = f"same file as {rel}"
    return [source for _, source in sorted(sources, key=lambda s: s[0])]
