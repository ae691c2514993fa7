"""Hostile times and JSONL files: every entry point refuses a time a datetime cannot hold
(years 1 to 9999, UTC) with InvalidArgumentError naming the argument; the code that
shows stored times never raises for one a store already holds; JSONL import and
export turn every bad file, line and disk failure into a memlane error (with the line
number where there is one), an import stores nothing unless every line is good, and a
failed export leaves no file behind."""

from __future__ import annotations

import errno
import io
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import memlane
from conftest import StoreFactory, WordHashEmbedder
from memlane import (
    AgentMemory,
    CorruptFileError,
    InvalidArgumentError,
    Memory,
    NotFoundError,
    StorageError,
    coerce,
)
from memlane.agent import MESSAGES, SessionScope, build_context
from memlane.agent.consolidation import SHORT_TERM, add_short_term, consolidate
from memlane.agent.daily import _lines
from memlane.agent.profiles import ContactProfile
from memlane.cli import main
from memlane.notes import NOTES

#: Times a datetime cannot hold, as unix seconds or an aware datetime.
OUT_OF_RANGE: list[Any] = [
    1e17,
    -1e12,
    253402300800.0,  # 10000-01-01 00:00:00 UTC
    -62135596801.0,  # a second before 0001-01-01 00:00:00 UTC
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),  # year 0 in UTC
    datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),  # year 10000 in UTC
]
FAR, EARLY = 1e17, -1e12
SCOPE = {"user_id": "alice"}


@pytest.fixture
def old_store_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lets any finite time in, as memlane did before times were checked, so a test can
    hold a store such a version wrote."""

    def timestamp(value: object, label: str) -> float:
        if isinstance(value, datetime):
            return value.timestamp()
        return coerce.number(value, label)

    monkeypatch.setattr(coerce, "timestamp", timestamp)


class Answer:
    """An LLM that answers every prompt with ``text`` and keeps the prompts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[Sequence[Any]] = []

    def complete(self, messages: Sequence[Any]) -> str:
        self.prompts.append(messages)
        return self.text


# -- times out of range ---------------------------------------------------------------------


@pytest.mark.parametrize("when", OUT_OF_RANGE, ids=repr)
def test_add_and_add_many_refuse_times_a_datetime_cannot_hold(
    make_store: StoreFactory, when: Any
) -> None:
    with make_store("t") as mem:
        with pytest.raises(InvalidArgumentError, match="created_at must be a time from the year"):
            mem.add("the past", created_at=when)
        with pytest.raises(InvalidArgumentError, match="record 1: created_at must be a time"):
            mem.add_many([{"text": "fine"}, {"text": "the past", "created_at": when}])
        assert mem.count() == 0
        # The ends themselves are times.
        first = mem.add("year one", created_at=-62135596800.0)
        last = mem.add("year 9999", created_at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))
        assert mem.get(first.id).created_at == -62135596800.0
        assert mem.get(last.id).created_at == 253402300799.0


@pytest.mark.parametrize(
    "when", [FAR, datetime(9999, 12, 31, 20, tzinfo=timezone(-timedelta(hours=5)))]
)
def test_supersede_refuses_a_time_a_datetime_cannot_hold(
    make_store: StoreFactory, when: Any
) -> None:
    with make_store("s") as mem:
        rec = mem.add("Alice lives in Paris", created_at=1000.0)
        with pytest.raises(InvalidArgumentError, match="at must be a time from the year"):
            mem.supersede(rec.id, "Alice lives in Berlin", at=when)
        assert [r.text for r in mem.list()] == ["Alice lives in Paris"]
        assert mem.get(rec.id).valid_to is None


@pytest.mark.parametrize("when", [FAR, EARLY])
def test_reads_refuse_times_a_datetime_cannot_hold(make_store: StoreFactory, when: Any) -> None:
    with make_store("r") as mem:
        mem.add("a note", created_at=1000.0)
        with pytest.raises(InvalidArgumentError, match="as_of must be a time"):
            mem.search("note", as_of=when)
        with pytest.raises(InvalidArgumentError, match="start must be a time"):
            mem.list(start=when)
        with pytest.raises(InvalidArgumentError, match="end must be a time"):
            mem.count(end=when)


@pytest.mark.parametrize("when", [FAR, EARLY])
def test_import_refuses_times_a_datetime_cannot_hold(
    make_store: StoreFactory, tmp_path: Path, when: float
) -> None:
    record = {"id": "r1", "text": "from the far future", "created_at": 1000.0}
    cases = {
        "created_at": [{**record, "created_at": when}],
        "updated_at": [{**record, "updated_at": when}],
        "last_accessed_at": [{**record, "last_accessed_at": when}],
        "valid_to": [{**record, "valid_to": when}],
        "history 'at'": [
            record,
            {"history": {**record, "id": "r0", "event": "update", "at": when, "next_id": None}},
        ],
    }
    with make_store("i") as mem:
        for name, lines in cases.items():
            path = tmp_path / "times.jsonl"
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
            where = f":{len(lines)}: "
            with pytest.raises(InvalidArgumentError, match=f"{where}{name} must be a time"):
                mem.import_jsonl(path)
            assert mem.count() == 0 and mem.history("r0") == []


@pytest.mark.parametrize("when", [FAR, EARLY])
def test_the_agent_refuses_a_clock_a_datetime_cannot_hold(
    make_store: StoreFactory, when: float
) -> None:
    with make_store("a") as mem:
        am = AgentMemory(
            mem, SessionScope("per-peer"), None, clock=lambda: when, context={"min_score": None}
        )
        event = am.event("telegram", 42, 7)
        msgs = am.before(event, [{"role": "user", "content": "hello"}])
        with pytest.raises(InvalidArgumentError, match=r"clock\(\) must be a time"):
            am.after(event, msgs, "hi")
        assert mem.count(MESSAGES) == 0


# -- stored times are shown, whatever they are ----------------------------------------------


@pytest.mark.usefixtures("old_store_times")
def test_build_context_shows_times_a_datetime_cannot_hold(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    with make_store("c", word_embedder) as mem:
        for text, when in (("from long ago", EARLY), ("from the far future", FAR)):
            mem.add(text, table=MESSAGES, type="message", room_id="r", created_at=when)
            mem.add(text, table=NOTES, type="journal", room_id="r", created_at=when)
        ctx = build_context(mem, "what happened?", {"room_id": "r"})
        assert "[0001-01-01 00:00] user: from long ago" in ctx.text
        assert "[9999-12-31 23:59] user: from the far future" in ctx.text
        assert "[0001-01-01] from long ago" in ctx.text
        assert "[9999-12-31] from the far future" in ctx.text


@pytest.mark.usefixtures("old_store_times")
def test_export_notes_writes_times_a_datetime_cannot_hold_as_the_nearest_date(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    with make_store("n") as mem:
        for when in (EARLY, FAR, float(2**70)):
            mem.add(f"entry at {when}", table=NOTES, type="journal", **SCOPE, created_at=when)
        assert mem.export_notes(tmp_path / "notes", **SCOPE)["JOURNAL.md"] == 3
        journal = (tmp_path / "notes" / "JOURNAL.md").read_text()
        assert "## 0001-01-01 00:00:00\n" in journal
        assert journal.count("## 9999-12-31 23:59:59\n") == 2
    # The dates written read back (as times a datetime holds).
    with make_store("n2") as other:
        assert other.import_notes(tmp_path / "notes", **SCOPE)["JOURNAL.md"] == 3
        dates = sorted(r.created_at for r in other.list(NOTES, **SCOPE))
        assert dates == [-62135596800.0, 253402300799.0, 253402300799.0]


@pytest.mark.usefixtures("old_store_times")
def test_consolidate_shows_times_a_datetime_cannot_hold(make_store: StoreFactory) -> None:
    answer = {"summary": "Alice looked at hotels.", "facts": [], "confidence": 0.9}
    llm = Answer(json.dumps(answer))
    with make_store("k") as mem:
        add_short_term(mem, "looked at hotels long ago", "a1", scope=SCOPE, created_at=EARLY)
        add_short_term(mem, "looked at hotels later", "a1", scope=SCOPE, created_at=FAR)
        report = consolidate(mem, llm, scope=SCOPE, force=True)
        assert report.status == "consolidated", report.error
        prompt = llm.prompts[0][-1]["content"]
        assert "[0001-01-01 00:00] looked at hotels long ago" in prompt
        assert "[9999-12-31 23:59] looked at hotels later" in prompt
        assert mem.count(SHORT_TERM, **SCOPE) == 0


def test_daily_lines_and_profiles_show_times_a_datetime_cannot_hold() -> None:
    ahead = timezone(timedelta(hours=14))
    rec = memlane.MemoryRecord(id="m", text="hi", created_at=FAR, metadata={"role": "user"})
    early = memlane.MemoryRecord(id="e", text="yo", created_at=-62135596800.0)
    assert _lines([rec, early], ahead) == ["[23:59] user: hi", "[14:00] user: yo"]
    assert _lines([early], timezone(-timedelta(hours=5))) == ["[00:00] user: yo"]
    profile = ContactProfile("alice", ("Alice",), {}, EARLY, FAR, 2, "p")
    assert profile.describe().endswith("since 0001-01-01, last seen 9999-12-31 23:59 UTC")


@pytest.mark.usefixtures("old_store_times")
def test_cli_list_shows_times_a_datetime_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Memory(tmp_path / "s", embedder=None) as mem:
        mem.add("from the far future", created_at=FAR)
    assert main(["list", "--store", str(tmp_path / "s"), "--embedder", "none"]) == 0
    assert "9999-12-3" in capsys.readouterr().out  # the last day, in the local time zone


# -- JSONL import -----------------------------------------------------------------------------


def _good(i: int) -> str:
    return json.dumps({"id": f"r{i}", "text": f"record {i}", "created_at": 1000.0 + i}) + "\n"


def _file(tmp_path: Path, *lines: str | bytes, good_before: int = 0) -> Path:
    path = tmp_path / "in.jsonl"
    body = "".join(_good(i) for i in range(good_before)).encode()
    path.write_bytes(body + b"".join(x if isinstance(x, bytes) else x.encode() for x in lines))
    return path


@pytest.mark.parametrize(
    ("line", "error", "message"),
    [
        ("[" * 100_000 + "]" * 100_000 + "\n", CorruptFileError, "nested too deeply"),
        ('{"text": "' + "x" * 100_000 + '", "metadata": ' + "[" * 100_000, CorruptFileError, ""),
        (b'{"text": "caf\xe9"}\n', CorruptFileError, "not UTF-8 text"),
        ('{"text": "n", "access_count": ' + "7" * 5001 + "}\n", CorruptFileError, "number"),
        ("not json\n", CorruptFileError, "not JSON"),
        ("[1, 2]\n", CorruptFileError, "not a JSON object"),
        ('{"text": "n", "created_at": "yesterday"}\n', InvalidArgumentError, "created_at"),
        ('{"id": "r3", "text": "again"}\n', InvalidArgumentError, "given twice"),
        ('{"text": "n", "embedding": [0.5]}\n', InvalidArgumentError, "no vector space"),
    ],
    ids=["deep", "deep-tail", "latin-1", "5001-digits", "text", "array", "time", "dup-id", "vec"],
)
def test_a_bad_line_is_named_and_nothing_is_stored(
    make_store: StoreFactory, tmp_path: Path, line: str | bytes, error: type, message: str
) -> None:
    # Past the first transaction's worth of good lines: today's import commits them
    # before it reads the bad one.
    path = _file(tmp_path, line, good_before=1500)
    with make_store("j") as mem:
        with pytest.raises(error, match=rf"in\.jsonl:1501: .*{message}"):
            mem.import_jsonl(path)
        assert mem.count() == 0


def test_a_stored_id_in_a_later_batch_stores_nothing(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    with make_store("j") as mem:
        mem.add("already here", id="r1400")
        path = _file(tmp_path, good_before=1500)
        with pytest.raises(InvalidArgumentError, match=r"in\.jsonl:1401: id 'r1400' is already"):
            mem.import_jsonl(path)
        assert mem.count() == 1
        assert mem.import_jsonl(path, on_conflict="skip") == 1499


def test_a_bad_vector_in_a_later_batch_stores_nothing(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    emb = WordHashEmbedder(dimension=4)
    zero = json.dumps({"text": "zero", "embedding": [0.0] * 4}) + "\n"
    with make_store("v", emb) as mem:
        with pytest.raises(InvalidArgumentError, match=r"in\.jsonl:1501: embedding is all zeros"):
            mem.import_jsonl(_file(tmp_path, zero, good_before=1500))
        assert mem.count() == 0


def test_a_missing_file_or_a_directory_is_a_memlane_error(tmp_path: Path) -> None:
    with Memory(tmp_path / "s", embedder=None) as mem:
        with pytest.raises(NotFoundError, match="no file"):
            mem.import_jsonl(tmp_path / "missing.jsonl")
        with pytest.raises(NotFoundError, match="no file"):
            mem.import_jsonl(tmp_path / "missing" / "in.jsonl")
        with pytest.raises(InvalidArgumentError, match="is a directory"):
            mem.import_jsonl(tmp_path)


def test_an_import_with_a_byte_order_mark_and_blank_lines_reads(tmp_path: Path) -> None:
    path = _file(tmp_path, b"\xef\xbb\xbf" + _good(1).encode(), b"\n  \n", _good(2).encode())
    with Memory(tmp_path / "s", embedder=None) as mem:
        assert mem.import_jsonl(path) == 2


# -- JSONL export -----------------------------------------------------------------------------


def _exported(mem: Memory) -> Memory:
    mem.add_many([{"text": f"note {i}", "id": f"n{i}"} for i in range(50)])
    return mem


def test_export_into_a_missing_folder_or_onto_a_directory(tmp_path: Path) -> None:
    with _exported(Memory(tmp_path / "s", embedder=None)) as mem:
        with pytest.raises(NotFoundError, match="no directory"):
            mem.export_jsonl(tmp_path / "missing" / "out.jsonl")
        assert not (tmp_path / "missing").exists()
        (tmp_path / "d").mkdir()
        with pytest.raises(InvalidArgumentError, match="is a directory"):
            mem.export_jsonl(tmp_path / "d")
        assert list((tmp_path / "d").iterdir()) == []


def _fill_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a file opened for writing takes 100 characters, then fails as on a
    full disk (ENOSPC)."""
    real_open = io.open

    class Full:
        def __init__(self, f: Any) -> None:
            self._f, self._room = f, 100

        def write(self, text: str) -> int:
            if len(text) > self._room:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._room -= len(text)
            return int(self._f.write(text))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

    def opening(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, mode, *args, **kwargs)
        return Full(f) if "w" in mode else f

    monkeypatch.setattr(io, "open", opening)


def test_a_full_disk_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with _exported(Memory(tmp_path / "s", embedder=None)) as mem:
        _fill_disk(monkeypatch)
        with pytest.raises(StorageError, match="No space left on device"):
            mem.export_jsonl(out / "export.jsonl")
        monkeypatch.undo()
    assert list(out.iterdir()) == []


def test_a_failed_fsync_leaves_the_old_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "export.jsonl"
    out.write_text("the previous export\n")

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with _exported(Memory(tmp_path / "s", embedder=None)) as mem:
        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(StorageError, match="No space left on device"):
            mem.export_jsonl(out)
        monkeypatch.undo()
    assert out.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.jsonl", "s"]


def test_an_export_replaces_the_file_and_reads_back(make_store: StoreFactory) -> None:
    out = make_store.tmp_path / "export.jsonl"
    out.write_text("the previous export\n")
    with make_store("e") as mem:
        _exported(mem)
        mem.supersede("n1", "note one, again", at=5e9)
        assert mem.export_jsonl(out) == 51
    assert sorted(p.name for p in make_store.tmp_path.iterdir() if p.name.startswith(".")) == []
    with make_store("f") as other:
        assert other.import_jsonl(out) == 51
        assert [v.record.text for v in other.history("n1")] == ["note 1", "note one, again"]
