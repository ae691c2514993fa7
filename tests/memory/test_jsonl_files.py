"""JSONL export and import with files that are not plain files, or not new: an export to
a named pipe or a device node is written into (the node stays what it was), one over a
file keeps that file's permissions and owner; an import reads a pipe, which can be read
once; and an import whose record the store's embedder cannot embed stores nothing.

Device nodes are made in the test's folder, never taken from /dev."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.coerce import FloatArray
from memlane.errors import CorruptFileError, EmbedderUnavailableError, StorageError

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="making a device node needs root"
)


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    with Memory(tmp_path / "store", None) as m:
        m.add("hello", user_id="alice")
        m.add("world", user_id="bob")
        yield m


def _device(path: Path, major: int, minor: int) -> Path:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except OSError as e:  # a container without CAP_MKNOD
        pytest.skip(f"cannot make a device node here: {e}")
    return path


def _reader(fifo: Path, got: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


# -- export ----------------------------------------------------------------------------------


@needs_fifo
def test_an_export_to_a_named_pipe_is_written_into_it(mem: Memory, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _reader(fifo, got)
    assert mem.export_jsonl(fifo) == 2
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(json.loads(line)["text"] for line in got[0].splitlines()) == ["hello", "world"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "store"]


@needs_fifo
def test_an_export_through_a_link_to_a_pipe_keeps_both(mem: Memory, tmp_path: Path) -> None:
    fifo, link = tmp_path / "pipe", tmp_path / "link"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    got: list[bytes] = []
    reader = _reader(fifo, got)
    assert mem.export_jsonl(link) == 2
    reader.join(10)
    assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(got[0].splitlines()) == 2


def test_an_export_to_a_pipes_descriptor_is_written_into_it(mem: Memory) -> None:
    # /dev/fd/N (and /dev/stdout) links to "pipe:[...]", which names no file.
    r, w = os.pipe()
    got: list[bytes] = []

    def read() -> None:
        with os.fdopen(r, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert mem.export_jsonl(f"/dev/fd/{w}") == 2
    finally:
        os.close(w)
    reader.join(10)
    assert sorted(json.loads(line)["text"] for line in got[0].splitlines()) == ["hello", "world"]


@needs_root
def test_an_export_to_a_device_leaves_the_device(mem: Memory, tmp_path: Path) -> None:
    null = _device(tmp_path / "null", 1, 3)  # a private /dev/null
    assert mem.export_jsonl(null) == 2
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "store"]


@needs_root
def test_an_export_to_a_full_device_is_a_storage_error(mem: Memory, tmp_path: Path) -> None:
    full = _device(tmp_path / "full", 1, 7)  # a private /dev/full
    with pytest.raises(StorageError, match=r"cannot write '.*full': No space left on device"):
        mem.export_jsonl(full)
    assert stat.S_ISCHR(os.lstat(full).st_mode)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
def test_an_export_over_a_file_keeps_its_permissions(
    mem: Memory, tmp_path: Path, mode: int
) -> None:
    out = tmp_path / "backup.jsonl"
    out.write_text("old\n", encoding="utf-8")
    out.chmod(mode)
    old_umask = os.umask(0o022)
    try:
        assert mem.export_jsonl(out) == 2
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


@needs_root
def test_an_export_over_a_file_keeps_its_owner(mem: Memory, tmp_path: Path) -> None:
    out = tmp_path / "backup.jsonl"
    out.write_text("old\n", encoding="utf-8")
    os.chown(out, 4321, 4322)
    out.chmod(0o640)
    mem.export_jsonl(out)
    st = out.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4321, 4322, 0o640)


def test_a_new_export_file_has_the_usual_permissions(mem: Memory, tmp_path: Path) -> None:
    out = tmp_path / "new.jsonl"
    old_umask = os.umask(0o027)
    try:
        mem.export_jsonl(out)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


# -- import ----------------------------------------------------------------------------------


def _data(n: int) -> bytes:
    return "".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(n)).encode()


def test_an_import_reads_a_pipe(tmp_path: Path) -> None:
    r, w = os.pipe()
    os.write(w, _data(5))
    os.close(w)
    try:
        with Memory(tmp_path / "s", None) as mem:
            assert mem.import_jsonl(f"/dev/fd/{r}") == 5
            assert mem.count() == 5
    finally:
        os.close(r)


def _import_in_time(mem: Memory, fifo: Path) -> int:
    """``mem.import_jsonl(fifo)``, failing the test (not hanging it) if the import opens
    the pipe a second time, which no writer will open again."""
    done: list[int | BaseException] = []

    def run() -> None:
        try:
            done.append(mem.import_jsonl(fifo))
        except BaseException as e:
            done.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # its reader sees the end
        thread.join(30)
        pytest.fail("the import waited for a second writer of the pipe")
    (result,) = done
    if isinstance(result, BaseException):
        raise result
    return result


@needs_fifo
def test_an_import_reads_a_named_pipe_and_names_it(tmp_path: Path) -> None:
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)

    def feed(data: bytes) -> None:
        def write() -> None:
            with open(fifo, "wb") as f:
                f.write(data)

        threading.Thread(target=write, daemon=True).start()

    with Memory(tmp_path / "s", None) as mem:
        feed(_data(3) + b"{not json\n")
        with pytest.raises(CorruptFileError, match=rf"^{fifo}:4: not JSON"):
            _import_in_time(mem, fifo)
        assert mem.count() == 0
        feed(_data(1500))
        assert _import_in_time(mem, fifo) == 1500
        assert mem.count() == 1500


class _Refusing(WordHashEmbedder):
    """Embeds nothing: a store's model that cannot be built, an endpoint that is down."""

    def embed(self, text: str) -> FloatArray:
        raise EmbedderUnavailableError("the model is not here")

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        raise EmbedderUnavailableError("the model is not here")


def test_an_import_whose_record_cannot_be_embedded_stores_nothing(tmp_path: Path) -> None:
    words = WordHashEmbedder()
    file = tmp_path / "in.jsonl"
    with file.open("w", encoding="utf-8") as f:
        for i in range(1200):
            vector = words.embed(f"vec {i}").tolist()
            f.write(json.dumps({"text": f"vec {i}", "embedding": vector}) + "\n")
        f.write(json.dumps({"text": "no vector here"}) + "\n")
    with Memory(tmp_path / "s", _Refusing()) as mem:
        with pytest.raises(
            EmbedderUnavailableError,
            match=r"in\.jsonl:1201: the record has no embedding, and the store's embedder "
            "cannot make one: the model is not here",
        ):
            mem.import_jsonl(file)
        assert mem.count() == 0


class _Counting(WordHashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        self.texts.extend(texts)
        return super().embed_batch(texts)


def test_an_import_embeds_each_text_once(tmp_path: Path) -> None:
    file = tmp_path / "in.jsonl"
    file.write_bytes(_data(3))
    embedder = _Counting()
    with Memory(tmp_path / "s", embedder) as mem:
        assert mem.import_jsonl(file) == 3
        # The check embeds the first text to learn the embedder works; the write takes
        # that vector from the cache.
        assert sorted(embedder.texts) == ["line 0", "line 1", "line 2"]
