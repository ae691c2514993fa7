"""The index files ``memlane.compat.hnswlib`` reads and writes: its own format (a magic
line, then length-prefixed JSON metadata and blobs) and the files hnswlib itself writes."""

from __future__ import annotations

import json
import os
import secrets
import stat
import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

_MAGIC = b"memlane.compat.hnswlib\n"
_FORMAT = 1
# hnswlib's message for a file it cannot read, which a damaged file's error starts with.
_CORRUPTED = "Index seems to be corrupted or unsupported"
# What parsing a damaged file's header, arrays or graph may raise (CorruptFileError and
# InvalidArgumentError are ValueErrors): turned into ``_corrupted`` by the loaders.
_DAMAGE = (KeyError, TypeError, ValueError, OverflowError, RecursionError)


def _path(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """``path`` as text, as hnswlib takes it (str, bytes or a path); one holding a NUL
    byte names no file (hnswlib's ``RuntimeError``, not ``ValueError``)."""
    text = os.fsdecode(path)
    if "\0" in text:
        raise RuntimeError("Cannot open file")
    return text


def _write(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    meta: dict[str, Any],
    blobs: list[bytes],
) -> None:
    """Writes ``magic, meta (JSON), blobs`` to ``path``: through a link, to the file it
    names; into a new file beside it, synced and renamed over it, with the mode the file
    had (else the umask's, as hnswlib's); in place where no file can be made beside it
    (a folder this user may not write to) or where it is no regular file (a device)."""
    head = json.dumps(meta).encode()
    target = Path(os.path.realpath(_path(path)))
    try:
        mode: int | None = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        _write_to(target, head, blobs)
        return
    while True:
        # Named for the file (what a kill leaves says whose it is), and short: the file's
        # own name may be as long as a name can be (16 characters: 64 bytes at most).
        tmp = target.parent / f".{target.name[:16]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except PermissionError:
            _write_to(target, head, blobs)
            return
        break
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(mode))
            _parts(f, head, blobs)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_to(target: Path, head: bytes, blobs: list[bytes]) -> None:
    with target.open("wb") as f:
        _parts(f, head, blobs)


def _parts(f: BinaryIO, head: bytes, blobs: list[bytes]) -> None:
    f.write(_MAGIC)
    for part in [head, *blobs]:
        f.write(struct.pack("<Q", len(part)))
        f.write(part)


def _corrupted(path: str | os.PathLike[str], why: str) -> RuntimeError:
    """hnswlib's error for a file it cannot read, naming the caller's file and why."""
    return RuntimeError(f"{_CORRUPTED}: {os.fspath(path)!r} {why}")


class _Damaged(ValueError):
    """A part of a saved file that does not fit the rest; its message says how."""


def _header_int(meta: dict[str, Any], key: str, low: int = 0, high: int | None = 2**64 - 1) -> int:
    """The int ``meta[key]``, from ``low`` to ``high`` (None: no bound), else ``_Damaged``."""
    value = meta[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        raise _Damaged(f"has a damaged header ({key} = {value!r:.40})")
    return value


def _why(error: BaseException) -> str:
    """What ``_corrupted`` says of one of ``_DAMAGE`` (never the text of an error that
    names a temporary file: the callers turn ``CorruptFileError`` into words of theirs)."""
    if isinstance(error, _Damaged):
        return str(error)
    if isinstance(error, KeyError):
        return f"has a damaged header (no {error.args[0]!r})" if error.args else "is damaged"
    return f"is damaged ({type(error).__name__}: {error})"


def _read_bytes(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> bytes:
    try:
        return Path(_path(path)).read_bytes()
    except OSError:
        raise RuntimeError("Cannot open file") from None


def _parse(
    raw: bytes, path: str | os.PathLike[str], kind: str, space: str, dim: int
) -> tuple[dict[str, Any], list[bytes]]:
    """A file written by ``save_index`` for an index of ``kind``, ``space`` and ``dim``:
    its metadata and blobs."""
    parts: list[bytes] = []
    at = len(_MAGIC)
    while at < len(raw):
        if at + 8 > len(raw):
            raise _corrupted(path, "is truncated")
        (n,) = struct.unpack_from("<Q", raw, at)
        at += 8
        if at + n > len(raw):
            raise _corrupted(path, "is truncated")
        parts.append(raw[at : at + n])
        at += n
    if not parts:
        raise _corrupted(path, "is truncated")
    try:
        meta = json.loads(parts[0])
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError
        meta = None
    if not isinstance(meta, dict):
        raise _corrupted(path, "has a damaged header")
    if meta.get("kind") != kind or meta.get("format") != _FORMAT:
        raise _corrupted(
            path,
            f"holds a {meta.get('kind')} (format {meta.get('format')}), "
            f"not a {kind} of format {_FORMAT}",
        )
    try:
        same = meta["space"] == space and int(meta["dim"]) == dim
    except _DAMAGE:
        raise _corrupted(path, "has a damaged header") from None
    if not same:
        raise RuntimeError(
            f"the file holds a {meta['space']!r} index of dim {meta['dim']}, "
            f"this {kind} is {space!r} of dim {dim}"
        )
    return meta, parts[1:]


# hnswlib's own files: HierarchicalNSW::saveIndex writes these fields, then every
# element's level-0 record (links, vector, label), then the upper levels' links.
_HNSW_HEAD = struct.Struct("<6QiI3QdQ")
# BruteforceSearch::saveIndex: max_elements, bytes per element, count, then the records.
_BF_HEAD = struct.Struct("<3Q")
_DELETE_MARK = 0x01


class _HnswlibFile:
    """The vectors, labels and deleted marks of an index file written by hnswlib."""

    def __init__(self, raw: bytes, dim: int, path: str | os.PathLike[str], brute: bool) -> None:
        bad = _corrupted(
            path,
            f"is neither a memlane.compat.hnswlib file nor an hnswlib "
            f"{'BFIndex' if brute else 'Index'} file of dim {dim}",
        )
        head = _BF_HEAD if brute else _HNSW_HEAD
        if len(raw) < head.size:
            raise bad
        fields = head.unpack_from(raw)
        if brute:
            self.max_elements, size, count = fields
            data_at, label_at, links_at = 0, dim * 4, -1
            self.m, self.ef_construction = 0, 0
        else:
            offset0, self.max_elements, count, size, label_at, data_at = fields[:6]
            self.m, self.ef_construction = int(fields[10]), int(fields[12])
            links_at = 2  # the byte of each record's link header that holds the mark
            if offset0 != 0:
                raise bad
        if (
            label_at - data_at != dim * 4
            or label_at + 8 > size
            or count > self.max_elements
            or head.size + count * size > len(raw)
        ):
            raise bad
        records = np.frombuffer(raw, dtype=np.uint8, count=count * size, offset=head.size)
        records = records.reshape(count, size)
        self.vectors = np.ascontiguousarray(records[:, data_at:label_at]).view(np.float32)
        self.labels = np.ascontiguousarray(records[:, label_at : label_at + 8]).view(np.uint64)
        self.labels = self.labels.reshape(-1)
        self.deleted = (
            np.zeros(count, dtype=bool) if brute else (records[:, links_at] & _DELETE_MARK) > 0
        )
        # hnswlib's replace_deleted may leave two records of one label (the deleted place
        # reused, the label's old record kept), and its loader's label lookup keeps the
        # last one read: so does this.
        _, from_end = np.unique(self.labels[::-1], return_index=True)
        if from_end.size < count:
            keep = np.sort(count - 1 - from_end)
            self.vectors, self.labels = self.vectors[keep], self.labels[keep]
            self.deleted = self.deleted[keep]
        self.count = int(self.labels.size)


def _array_bytes(array: npt.NDArray[Any]) -> bytes:
    return np.ascontiguousarray(array).tobytes()
