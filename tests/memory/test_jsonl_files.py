"""JSONL export and import with files that are not plain files, or not new: an export to
a named pipe, a device node or a descriptor of the process is written into (the node
stays what it was, a descriptor's file keeps what it held), one to a pipe nobody reads
is refused, one over a file keeps that file's permissions and owner; an import reads a
pipe, which can be read once, checking each line as it comes; and an import whose record
the store's embedder refuses or cannot embed, at any line, stores nothing.

Device nodes are made in the test's folder, never taken from /dev."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane._memory import jsonl
from memlane.coerce import FloatArray
from memlane.errors import (
    CorruptFileError,
    EmbedderUnavailableError,
    InvalidArgumentError,
    StorageError,
)

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


@contextlib.contextmanager
def _read_end(fifo: Path) -> Iterator[Callable[[], bytes]]:
    """The pipe's reading end, open before an export opens the other (it refuses a pipe
    that no process reads); what it holds is read once the export closed its end."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def read() -> bytes:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        yield read
    finally:
        os.close(fd)


def _in_time(call: Callable[[], int], release: Callable[[], None]) -> int:
    """``call()``, failing the test (not hanging it) if it waits for a pipe's other end,
    which no process will open: ``release`` then opens that end, so that it returns."""
    done: list[int | BaseException] = []

    def run() -> None:
        try:
            done.append(call())
        except BaseException as e:
            done.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        release()
        thread.join(30)
        pytest.fail("the call waited for the other end of a pipe")
    (result,) = done
    if isinstance(result, BaseException):
        raise result
    return result


# -- export ----------------------------------------------------------------------------------


@needs_fifo
def test_an_export_to_a_named_pipe_is_written_into_it(mem: Memory, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with _read_end(fifo) as read:
        assert mem.export_jsonl(fifo) == 2
        got = read()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(json.loads(line)["text"] for line in got.splitlines()) == ["hello", "world"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "store"]


@needs_fifo
def test_an_export_through_a_link_to_a_pipe_keeps_both(mem: Memory, tmp_path: Path) -> None:
    fifo, link = tmp_path / "pipe", tmp_path / "link"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    with _read_end(fifo) as read:
        assert mem.export_jsonl(link) == 2
        got = read()
    assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(got.splitlines()) == 2


@needs_fifo
def test_an_export_to_a_named_pipe_nobody_reads_is_refused(mem: Memory, tmp_path: Path) -> None:
    # Opening it waited for a reader without a bound, with the store held meanwhile.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def release() -> None:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))

    with pytest.raises(StorageError, match=r"cannot write '.*pipe': no process reads the named"):
        _in_time(lambda: mem.export_jsonl(fifo), release)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "store"]


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


@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("name", ["/dev/fd/{}", "/proc/self/fd/{}", "link"])
def test_an_export_to_a_files_descriptor_writes_where_it_stands(
    mem: Memory, tmp_path: Path, name: str, append: bool
) -> None:
    # `{ echo header; memlane export S /dev/stdout; echo footer; } > out`, or `... >> log`:
    # the export renamed a new file over the one the descriptor writes, and what it
    # held (the header, the log) was lost.
    if not os.path.isdir(os.path.dirname(name)) and name != "link":
        pytest.skip(f"no {os.path.dirname(name)} here")
    out = tmp_path / "out.log"
    out.write_bytes(b"earlier\n")
    fd = os.open(out, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
    try:
        if not append:
            os.write(fd, b"header\n")
        path = name.format(fd)
        if name == "link":
            path = str(tmp_path / "link")
            os.symlink(f"/dev/fd/{fd}", path)
        inode = os.stat(out).st_ino
        assert mem.export_jsonl(path) == 2
        os.write(fd, b"footer\n")
    finally:
        os.close(fd)
    first, *lines, last = out.read_bytes().splitlines()
    assert (first, last) == (b"earlier" if append else b"header", b"footer")
    assert sorted(json.loads(line)["text"] for line in lines) == ["hello", "world"]
    assert os.stat(out).st_ino == inode


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

    def release() -> None:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # its reader sees the end

    return _in_time(lambda: mem.import_jsonl(fifo), release)


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


@needs_fifo
def test_an_import_refuses_a_pipes_bad_line_while_the_data_still_comes(tmp_path: Path) -> None:
    # The pipe was copied whole before its first line was read: endless data after a
    # bad line filled the temporary folder, and the error never came.
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    sent_all = threading.Event()

    def feed() -> None:
        chunk = (json.dumps({"text": "filler " * 20}) + "\n").encode() * 1000
        try:
            with open(fifo, "wb") as f:
                f.write(b"this is not json\n")
                # Some 60 MB, far more than a pipe holds: an import that reads it all
                # before the check still ends.
                for _ in range(400):
                    f.write(chunk)
            sent_all.set()
        except BrokenPipeError:  # the import closed its end, as it should
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with Memory(tmp_path / "s", None) as mem:
        with pytest.raises(CorruptFileError, match=rf"^{fifo}:1: not JSON"):
            mem.import_jsonl(fifo)
        assert not sent_all.is_set()
        assert mem.count() == 0
    writer.join()


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


class _Refusing_text(WordHashEmbedder):
    """Refuses a text, as the ONNX model does one of only invisible characters."""

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        for i, text in enumerate(texts):
            if "unreadable" in text:
                raise InvalidArgumentError(f"texts[{i}] has nothing the model can read")
        return super().embed_batch(texts)


@pytest.mark.parametrize("bad", [1, 700, 1500])
def test_an_import_whose_text_the_embedder_refuses_stores_nothing(tmp_path: Path, bad: int) -> None:
    # The check embedded only the first text left to the embedder: a text refused
    # further on failed the write, after 1,000 records were committed.
    file = tmp_path / "in.jsonl"
    lines = [{"text": "unreadable" if i == bad else f"line {i}"} for i in range(1, 1501)]
    file.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with Memory(tmp_path / "s", _Refusing_text()) as mem:
        with pytest.raises(InvalidArgumentError) as refused:
            mem.import_jsonl(file)
        assert mem.count() == 0
    refused.match(
        rf"in\.jsonl:{bad}: the record has no embedding, and the store's embedder refuses "
        r"its text: texts\[0\] has nothing the model can read$"
    )


class _Tiring(WordHashEmbedder):
    """Answers ``answers`` calls, then stops: an endpoint that goes down midway."""

    def __init__(self, answers: int) -> None:
        super().__init__()
        self.answers = answers

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        if self.calls == self.answers:
            raise EmbedderUnavailableError("the endpoint stopped answering")
        return super().embed_batch(texts)


def test_an_import_whose_embedder_stops_answering_stores_nothing(tmp_path: Path) -> None:
    file = tmp_path / "in.jsonl"
    file.write_bytes(_data(2500))
    with Memory(tmp_path / "s", _Tiring(answers=2)) as mem:
        with pytest.raises(EmbedderUnavailableError) as failed:
            mem.import_jsonl(file)
        assert mem.count() == 0
    failed.match(
        r"in\.jsonl:2001: the record has no embedding, and the store's embedder cannot make "
        "one: the endpoint stopped answering"
    )


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
        # The check embeds the texts; the write takes their vectors from it.
        assert sorted(embedder.texts) == ["line 0", "line 1", "line 2"]


def _vector(mem: Memory, record_id: str) -> FloatArray:
    vector = mem.get(record_id, include_embedding=True).embedding
    assert vector is not None
    return vector


def _is(stored: FloatArray, vector: FloatArray) -> bool:
    """Whether ``stored`` is ``vector`` as a store keeps it (in half precision)."""
    return bool(np.allclose(stored, vector, rtol=0, atol=1e-3))


def test_an_imported_record_is_stored_as_if_the_writer_had_embedded_it(tmp_path: Path) -> None:
    words = WordHashEmbedder()
    items = [
        {"text": "alpha bravo", "id": "a", "user_id": "u", "importance": 0.7},
        {"text": "charlie", "id": "b", "embedding": words.embed("zulu").tolist()},
        {"text": "delta echo", "id": "c", "metadata": {"k": 1}},
    ]
    file = tmp_path / "in.jsonl"
    file.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    with (
        Memory(tmp_path / "imported", WordHashEmbedder()) as mem,
        Memory(tmp_path / "added", WordHashEmbedder()) as added,
    ):
        assert mem.import_jsonl(file) == 3
        added.add_many(items)
        for rid in ("a", "b", "c"):
            assert np.array_equal(_vector(mem, rid), _vector(added, rid))
            got, want = mem.get(rid).to_dict(), added.get(rid).to_dict()
            for field in ("created_at", "updated_at", "last_accessed_at", "recorded_at"):
                got.pop(field), want.pop(field)
            assert got == want
        assert _is(_vector(mem, "a"), words.embed("alpha bravo"))
        assert _is(_vector(mem, "b"), words.embed("zulu"))
        assert mem.search("alpha bravo", k=1, mode="vector")[0].record.id == "a"
        assert mem.search("delta echo", k=1, mode="vector")[0].record.id == "c"


def test_a_skipping_import_embeds_only_what_it_adds(tmp_path: Path) -> None:
    # A retry of an import killed midway: the records it stored are not embedded again.
    words = WordHashEmbedder()
    file = tmp_path / "in.jsonl"
    file.write_text(
        "".join(json.dumps({"text": f"text {i}", "id": f"x{i}"}) + "\n" for i in range(4)),
        encoding="utf-8",
    )
    with Memory(tmp_path / "s", WordHashEmbedder()) as mem:
        assert mem.import_jsonl(file) == 4
    with file.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"text": "given", "id": "g", "embedding": words.embed("z").tolist()}))
        f.write("\n" + json.dumps({"text": "text new", "id": "n"}) + "\n")
        f.write(json.dumps({"text": "text anon"}) + "\n")
    embedder = _Counting()
    with Memory(tmp_path / "s", embedder) as mem:
        assert mem.import_jsonl(file, on_conflict="skip") == 3
        assert sorted(embedder.texts) == ["text anon", "text new"]
        for record in mem.list(limit=10):
            want = words.embed("z" if record.id == "g" else record.text)
            assert _is(_vector(mem, record.id), want), record.id


def test_a_record_skipped_when_checked_and_deleted_before_written_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "in.jsonl"
    file.write_text(json.dumps({"text": "text 0", "id": "x0"}) + "\n", encoding="utf-8")
    with Memory(tmp_path / "s", WordHashEmbedder()) as mem:
        mem.add("text 0", id="x0")
        load = jsonl._load

        def deleted_meanwhile(*args: Any) -> int:
            mem.delete("x0")  # another writer, between the check and the write
            return load(*args)

        monkeypatch.setattr(jsonl, "_load", deleted_meanwhile)
        assert mem.import_jsonl(file, on_conflict="skip") == 1
        assert _is(_vector(mem, "x0"), WordHashEmbedder().embed("text 0"))


def test_an_import_of_a_file_that_grew_after_its_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "in.jsonl"
    file.write_bytes(_data(3))
    check = jsonl._check

    def appended_meanwhile(*args: Any) -> None:
        check(*args)
        with file.open("ab") as f:
            f.write(_data(1))

    monkeypatch.setattr(jsonl, "_check", appended_meanwhile)
    with Memory(tmp_path / "s", WordHashEmbedder()) as mem:
        with pytest.raises(StorageError, match="changed while it was imported"):
            mem.import_jsonl(file)
        assert mem.count() == 0
