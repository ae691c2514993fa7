"""The command line and the files it is given: a STORE whose memory.db is another
program's SQLite database or empty, an export to /dev/stdout that is a pipe or a file
the shell opened, an import from a pipe or one whose records the store's embedder
cannot embed, an id given twice to forget, and key=value numbers too long for Python
to read."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.cli import main
from memlane.storage.sqlite_owner import sqlite_tables

TEXT = ["--embedder", "none"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# -- a memory.db that holds no store ---------------------------------------------------------


@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize(
    "argv",
    [["stats"], ["list"], ["get", "x"], ["export", "out.jsonl"], ["add", "x", "--create"]],
)
def test_another_programs_database_is_refused_and_left_as_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], journal: str
) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    with sqlite3.connect(folder / "memory.db") as db:
        db.execute(f"PRAGMA journal_mode = {journal}")
        db.execute("CREATE TABLE invoices (n INTEGER)")
        db.execute("INSERT INTO invoices VALUES (1)")
    db.close()
    before = snapshot(folder)
    command, *rest = argv
    if command == "export":
        rest = [str(tmp_path / "out.jsonl")]
    code, out, err = run(capsys, command, str(folder), *rest, *TEXT)
    assert code == 1 and out == ""
    assert err == (
        f"memlane: error: {folder / 'memory.db'} is not a memlane store: a SQLite database "
        "of other tables (invoices); memlane leaves it as it is\n"
    )
    assert snapshot(folder) == before
    assert not (tmp_path / "out.jsonl").exists()


def test_an_empty_memory_db_is_no_store_without_create(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "memory.db").write_bytes(b"")
    code, _, err = run(capsys, "list", str(folder))
    assert code == 1 and err == f"memlane: error: no memlane store at {folder}\n"
    code, _, err = run(capsys, "add", str(folder), "x", *TEXT)
    assert code == 1 and err.endswith("; pass --create to make a new one\n")
    assert snapshot(folder) == {"memory.db": b""}
    code, _, err = run(capsys, "add", str(folder), "a memory", "--create", *TEXT)
    assert code == 0 and "creating a new store" in err
    with Memory(folder, None) as mem:
        assert [r.text for r in mem.list()] == ["a memory"]


def test_tables_only_in_the_wal_are_read(tmp_path: Path) -> None:
    # What a writer killed before its first checkpoint leaves: the tables in the -wal
    # alone, which the file as it lies on disk does not show.
    live, copy = tmp_path / "live", tmp_path / "copy"
    live.mkdir()
    copy.mkdir()
    db = sqlite3.connect(live / "memory.db")
    db.execute("PRAGMA journal_mode = wal")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("CREATE TABLE records (id TEXT)")
    db.commit()
    for name in ("memory.db", "memory.db-wal"):
        (copy / name).write_bytes((live / name).read_bytes())
    db.close()
    assert sqlite_tables(copy / "memory.db") == {"meta", "records"}


# -- export ----------------------------------------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True])
def test_an_export_to_stdout_writes_the_lines_alone_there(tmp_path: Path, as_json: bool) -> None:
    store = tmp_path / "s"
    with Memory(store, None) as mem:
        mem.add("hello")
        mem.add("world")
    # Standard output a pipe: /dev/stdout links to no file a rename could replace.
    res = subprocess.run(
        [sys.executable, "-m", "memlane", "export", str(store), "/dev/stdout"]
        + (["--json"] if as_json else []),
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert sorted(json.loads(line)["text"] for line in res.stdout.splitlines()) == [
        "hello",
        "world",
    ]
    said = json.loads(res.stderr) if as_json else res.stderr
    assert said == (
        {"exported": 2, "file": "/dev/stdout"} if as_json else "exported 2 records to /dev/stdout\n"
    )


@pytest.mark.parametrize("append", [False, True])
def test_an_export_to_stdout_that_is_a_file_writes_into_it(tmp_path: Path, append: bool) -> None:
    # `memlane export S /dev/stdout >> app.log`, `{ echo header; memlane export S
    # /dev/stdout; echo footer; } > out`: a new file was renamed over the shell's, and
    # the log's earlier lines, or the header and the footer, were lost.
    store = tmp_path / "s"
    with Memory(store, None) as mem:
        mem.add("hello")
    out = tmp_path / "out"
    out.write_bytes(b"earlier\n")
    with out.open("ab" if append else "wb") as stdout:
        if not append:
            stdout.write(b"header\n")
            stdout.flush()
        res = subprocess.run(
            [sys.executable, "-m", "memlane", "export", str(store), "/dev/stdout"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
        stdout.write(b"footer\n")
    assert res.returncode == 0, res.stderr
    assert res.stderr == "exported 1 records to /dev/stdout\n"
    first, line, last = out.read_bytes().splitlines()
    assert (first, last) == (b"earlier" if append else b"header", b"footer")
    assert json.loads(line)["text"] == "hello"


# -- import ----------------------------------------------------------------------------------


def test_import_reads_a_fifo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    fifo = tmp_path / "records.fifo"
    os.mkfifo(fifo)
    data = "".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(5)).encode()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    code, out, err = run(capsys, "import", str(tmp_path / "s"), str(fifo), "--create", *TEXT)
    writer.join(5)
    assert code == 0, err
    assert out == f"imported 5 records from {fifo}\n"
    with Memory(tmp_path / "s", None) as mem:
        assert mem.count() == 5


def test_import_of_a_directory_makes_no_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "import", str(tmp_path / "s"), str(tmp_path), "--create", *TEXT)
    assert code == 1 and err == f"memlane: error: {tmp_path} is a directory, not a JSONL file\n"
    assert not (tmp_path / "s").exists()


def test_an_import_whose_record_cannot_be_embedded_stores_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Built with an embedder the command line cannot build: it opens the store, and
    # cannot embed a record that comes without its vector (line 1001, past the first
    # transaction's worth of lines that have theirs).
    embedder = WordHashEmbedder()
    store = tmp_path / "store"
    Memory(store, embedder).close()
    file = tmp_path / "in.jsonl"
    with file.open("w", encoding="utf-8") as f:
        for i in range(1000):
            vector = embedder.embed(f"vec {i}").tolist()
            f.write(json.dumps({"text": f"vec {i}", "embedding": vector}) + "\n")
        f.write(json.dumps({"text": "no vector here"}) + "\n")
    code, _, err = run(capsys, "import", str(store), str(file))
    assert code == 1
    assert err.startswith(
        f"memlane: error: {file}:1001: the record has no embedding, and the store's embedder "
        "cannot make one: this store was built with the embedder 'test:word-hash'"
    )
    with Memory(store, embedder) as mem:
        assert mem.count() == 0


# -- forget ----------------------------------------------------------------------------------


def test_forget_an_id_given_twice_deletes_it_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = str(tmp_path / "s")
    code, out, _ = run(capsys, "add", store, "one", "two", "three", "--create", *TEXT)
    one, two, three = out.split()
    code, out, err = run(capsys, "forget", store, one, two, one, "--json")
    assert code == 0, err
    assert json.loads(out) == {"deleted": [one, two]}
    with Memory(store, None) as mem:
        assert [r.id for r in mem.list()] == [three]
    code, out, _ = run(capsys, "forget", store, three, three)
    assert (code, out) == (0, "deleted 1 memory\n")


# -- key=value -------------------------------------------------------------------------------


def test_a_number_too_long_to_read_is_taken_as_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = str(tmp_path / "s")
    digits = "9" * 5000  # past sys.get_int_max_str_digits()
    code, _, err = run(capsys, "add", store, "x", "--meta", f"k={digits}", "--create", *TEXT)
    assert code == 0, err
    code, out, err = run(capsys, "list", store, "--where", f"k={digits}", "--json")
    assert code == 0, err
    (record,) = json.loads(out)["records"]
    assert record["metadata"] == {"k": digits}
