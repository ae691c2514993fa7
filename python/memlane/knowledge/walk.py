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
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from memlane.errors import InvalidArgumentError
from memlane.knowledge.document_limits import DocumentLimitError
from memlane.knowledge.ids import normalise_path
from memlane.knowledge.loaders import Loader, loader_for

if sys.platform == "darwin":
    import fcntl

__all__ = [
    "LeftOut",
    "Source",
    "hidden",
    "inside",
    "relative_path",
    "resolve",
    "walk",
]


class LeftOut(Exception):
    """A file the walk found that is no longer one to read (a link to outside the root
    swapped in since): the ingest skips it, with the reason."""


@dataclass(frozen=True, slots=True)
class Source:
    """One document to ingest: a file (``path``) or a text given as bytes (``data``).

    ``root`` is the real knowledge root the file must lie in when it is read (None: it
    may lie anywhere, ``follow_outside``); ``link`` says the walk found ``path`` itself
    a symbolic link (any other must not have become one).
    """

    rel: str
    loader: Loader
    path: Path | None = None
    data: bytes | None = None
    root: Path | None = None
    link: bool = False

    def read(self, limit: int) -> bytes:
        """The bytes of the text or the file; ``DocumentLimitError`` past ``limit`` bytes
        (judged by the file's size before it is read: a 3 GB file is not read to be
        refused), ``LeftOut`` if it now lies outside the root, ``OSError`` if the file
        cannot be read, or is no longer a regular file (replaced since the walk)."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        if not stat.S_ISREG(mode := self.path.stat().st_mode):
            raise OSError(errno.EINVAL, _not_regular(mode))
        # Replaced between the two looks, a FIFO opened without O_NONBLOCK would wait for
        # a writer; a regular file reads the same with it. A path that was no link at the
        # walk must not become one (to a file outside the root) before this open.
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        if self.root is not None and not self.link:
            flags |= getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags)
        except OSError as e:
            if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
                raise LeftOut("replaced by a symbolic link since the folder was walked") from None
            raise
        with open(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, _not_regular(info.st_mode))
            if self.root is not None and not _opened_inside(fd, self.path, info, self.root):
                raise LeftOut("outside the knowledge root once opened (a folder or link swapped)")
            if info.st_size > limit:
                raise DocumentLimitError(f"{info.st_size} bytes, above max_unpacked_bytes={limit}")
            data = f.read(info.st_size + 1)  # a byte more tells of a file grown since
            if len(data) > info.st_size:
                data += f.read(limit + 1 - len(data))
            if len(data) > limit:
                raise DocumentLimitError(f"more than {limit} bytes, above max_unpacked_bytes")
            return data


def _opened_inside(fd: int, path: Path, info: os.stat_result, root: Path) -> bool:
    """Whether the file open as ``fd`` lies inside the real ``root``: its real path as the
    system names it (``/proc/self/fd``, macOS's ``F_GETPATH``), else the file at the real
    path of ``path`` checked to be this very one (device and inode)."""
    real: str | None = None
    proc = f"/proc/self/fd/{fd}"
    try:
        if os.path.islink(proc):
            real = os.readlink(proc)
        elif sys.platform == "darwin":
            got = fcntl.fcntl(fd, fcntl.F_GETPATH, b"\0" * 1024)
            real = os.fsdecode(got.rstrip(b"\0"))
    except OSError:
        real = None
    if real is not None:
        return inside(Path(real), root)
    try:
        resolved = resolve(path)
        seen = resolved.stat()
    except OSError:
        return False
    return inside(resolved, root) and (seen.st_dev, seen.st_ino) == (info.st_dev, info.st_ino)


def exists(path: Path) -> bool:
    """Whether ``path`` names something; ``InvalidArgumentError`` for a path the system
    cannot look up (a name too long, a link loop), which ``Path.exists`` raises raw."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise InvalidArgumentError(f"cannot look at {str(path)!r}: {e.strerror or e}") from None
    return True


def resolve(path: Path) -> Path:
    """``path.resolve()``, with a link loop an ``OSError`` (ELOOP): Python before 3.13
    raises ``RuntimeError`` for it, which would end a whole ingest."""
    try:
        return path.resolve()
    except RecursionError:  # a RuntimeError too: pathlib follows each link by recursion
        raise OSError(errno.ELOOP, "symbolic link chain too deep", str(path)) from None
    except RuntimeError:
        raise OSError(errno.ELOOP, "symbolic link loop", str(path)) from None


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


def hidden(name: str) -> bool:
    """Whether a walk leaves out a file or folder of this name (unless named itself)."""
    return name.startswith(".")


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
    apart: Mapping[Path, str] | None = None,
    unread: set[str] | None = None,
) -> list[Source]:
    """The supported files at ``target`` (a file or a folder) below ``root``.

    Paths are relative to ``root``; what is left out goes into ``skipped`` as
    relative path -> reason, and a second path to a file found also into ``same``, if
    given, as that path -> the file's path. ``target`` itself is taken as given (a
    hidden file named explicitly is ingested) but must lie inside ``root`` unless
    ``follow_outside``. The folders and files of ``apart`` (real path -> reason: roots
    of their own, see ``ingest.roots_apart``) are left out, with that reason. The paths
    the system would not let it look at (a folder it may not list, a file it may not
    stat: they may still hold files) go into ``unread``, if given.
    """
    apart = apart or {}
    unread = set() if unread is None else unread
    real_root = resolve(root)
    # Where a file found must still lie when it is read (Source.read).
    root_of_reads = None if follow_outside else real_root
    # (is a link, order found, rel, path, loader, path itself a link) per file, by real
    # path: a file reached twice is ingested once, under its own path rather than a link's.
    found: dict[Path, list[tuple[bool, int, str, Path, Loader, bool]]] = {}
    counter = itertools.count()

    def apart_from(real: Path) -> str | None:
        """Why ``real`` is left out: it, or a folder it lies in below the root, is apart
        (reached by its own path, a link into it, or named as the target)."""
        for folder in (real, *real.parents) if apart else ():
            if folder == real_root:
                return None
            if folder in apart:
                return apart[folder]
        return None

    def add_file(path: Path, rel: str, link: bool) -> None:
        real = resolve(path)
        if (reason := apart_from(real)) is not None:
            skipped[rel] = reason
            return
        loader = loader_for(path)
        if loader is None:
            suffix = path.suffix.lower()
            skipped[rel] = f"unsupported type {suffix!r}" if suffix else "unsupported type"
            return
        paths = found.setdefault(real, [])
        paths.append((link, next(counter), rel, path, loader, path.is_symlink()))

    # The folders being listed, deepest last, each with the entries still to see: a
    # walk in the order of a recursive one, without Python's recursion bound (a tree
    # 1,000 folders deep raised RecursionError).
    frames: list[tuple[Iterator[os.DirEntry[str]], str, frozenset[Path], bool]] = []

    def enter(folder: Path, prefix: str, ancestors: frozenset[Path], linked: bool) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            skipped[prefix or "."] = f"cannot list the folder: {_describe(e)}"
            unread.add(prefix or ".")
            return
        frames.append((iter(entries), prefix, ancestors, linked))

    def visit(folder: Path, prefix: str, ancestors: frozenset[Path], linked: bool) -> None:
        enter(folder, prefix, ancestors, linked)
        while frames:
            entries, prefix, ancestors, linked = frames[-1]
            entry = next(entries, None)
            if entry is None:
                frames.pop()
                continue
            rel = f"{prefix}{entry.name}"
            path = Path(entry.path)
            if hidden(entry.name):
                skipped[rel + ("/" if entry.is_dir() else "")] = "hidden"
                continue
            try:
                link = entry.is_symlink() or linked
                if entry.is_symlink():
                    real = resolve(path)
                    if not real.exists():
                        skipped[rel] = "broken symbolic link"
                        continue
                    if not follow_outside and not inside(real, real_root):
                        skipped[rel] = "symbolic link to outside the knowledge root"
                        continue
                if entry.is_dir():
                    real = resolve(path)
                    if real in ancestors:
                        skipped[rel + "/"] = "symbolic link loop"
                        continue
                    if (reason := apart_from(real)) is not None:
                        skipped[rel + "/"] = reason
                        continue
                    enter(path, rel + "/", ancestors | {real}, link)
                elif entry.is_file():
                    add_file(path, normalise_path(rel), link)
                else:
                    skipped[rel] = _not_regular(entry.stat().st_mode)
            except OSError as e:
                skipped[rel] = _describe(e)
                unread.add(rel)

    rel_target = relative_path(target, root)
    try:
        real_target = resolve(target)
    except OSError as e:
        skipped[rel_target] = _describe(e)
        unread.add(rel_target)
        return []
    if not follow_outside and not inside(real_target, real_root):
        skipped[rel_target] = "outside the knowledge root"
        return []
    if (reason := apart_from(real_target)) is not None:
        skipped[rel_target] = reason
        return []
    try:
        mode = target.stat().st_mode
    except OSError as e:
        skipped[rel_target] = _describe(e)
        unread.add(rel_target)
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
        _, order, rel, path, loader, is_link = min(paths)
        source = Source(rel, loader, path=path, root=root_of_reads, link=is_link)
        sources.append((order, source))
        for _, _, other, *_ in paths:
            if other != rel:
                skipped[other] = f"same file as {rel}"
                if same is not None:
                    same[other] = rel
    return [source for _, source in sorted(sources, key=lambda s: s[0])]
