"""The notes folder under attack, on both backends: an export killed between writing a
file aside and renaming it leaves that file behind, and later imports skip it (without
reading it); an export that fails removes what it wrote aside; an unchanged export of
entries dated to the fraction of a second imports as unchanged, while real edits are
still seen; a link planted where an export used to write aside is never written through.
An import is checked whole (dates a datetime cannot hold in UTC included) and stored in
one transaction, never reads through a link, and reads an indented heading back as
text; no edit stores a line the export would write as a heading; an export keeps a
replaced file's permissions and syncs the folder after its renames."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from memlane import InvalidArgumentError, StorageError
from memlane.notes import NOTE_FILES, NOTES, Notebook

SCOPE = {"agent_id": "a"}


def entries(mem: Any) -> list[tuple[str, str, str, float]]:
    """Every current note of the scope: id, kind, text, date."""
    recs = mem.list(NOTES, limit=1000, filters={"valid_to": None}, **SCOPE)
    return sorted((r.id, r.type, r.text, r.created_at) for r in recs)


def reads_back(mem: Any, folder: Path) -> None:
    """An untouched export of the scope's notes imports as nothing new: each as it was."""
    before = entries(mem)
    mem.export_notes(folder, **SCOPE)
    assert set(mem.import_notes(folder, **SCOPE).values()) == {0}
    assert entries(mem) == before


def asides(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in NOTE_FILES)


def failing_replace(monkeypatch: pytest.MonkeyPatch, folder: Path, *, cleanup: bool) -> None:
    """Makes renames into ``folder`` fail; without ``cleanup``, the export's removal of
    the file it wrote aside is lost too, as when a kill -9 stops it before the rename."""
    real_replace, real_unlink = os.replace, os.unlink

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).parent == folder:
            raise OSError(5, "Input/output error")
        real_replace(src, dst, *args, **kwargs)

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path).parent == folder:
            return
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    if not cleanup:
        monkeypatch.setattr(os, "unlink", unlink)


def test_import_skips_what_a_killed_export_left_aside(
    make_store, word_embedder, tmp_path, monkeypatch
):
    mem = make_store("killed", word_embedder)
    out = tmp_path / "out"
    try:
        book = Notebook(mem, SCOPE)
        book.append("JOURNAL.md", "First entry.")
        mem.export_notes(out, **SCOPE)
        book.append("JOURNAL.md", "Second entry.")
        with monkeypatch.context() as patch:
            failing_replace(patch, out, cleanup=False)
            with pytest.raises(StorageError, match=r"cannot write JOURNAL\.md"):
                mem.export_notes(out, **SCOPE)
        left = asides(out)
        assert len(left) == 1 and re.fullmatch(r"\.JOURNAL\.md\..+\.tmp", left[0]), left
        # As an earlier version named it, and not read: its bytes are not UTF-8.
        (out / ".MEMORY.md.tmp").write_bytes(b"## 2026-01-01\nCaf\xe9\n")

        stored = mem.import_notes(out, **SCOPE)
        assert stored == {name: 0 for name in NOTE_FILES} | {"JOURNAL.md": 1}
        assert [e[2] for e in entries(mem)] == ["First entry."]
        assert len(asides(out)) == 2  # left where they are

        # Any other file is still refused.
        (out / ".JOURNAL.md.tmp.bak").write_text("x", encoding="utf-8")
        with pytest.raises(
            InvalidArgumentError, match=r"unknown file\(s\) \['.JOURNAL.md.tmp.bak'\]"
        ):
            mem.import_notes(out, **SCOPE)
    finally:
        mem.close()


def test_a_failed_export_removes_what_it_wrote_aside(
    make_store, word_embedder, tmp_path, monkeypatch
):
    mem = make_store("failed", word_embedder)
    out = tmp_path / "out"
    try:
        Notebook(mem, SCOPE).append("USER.md", "Alice is vegan.")
        mem.export_notes(out, **SCOPE)
        before = {name: (out / name).read_bytes() for name in NOTE_FILES}
        with monkeypatch.context() as patch:
            failing_replace(patch, out, cleanup=True)
            with pytest.raises(StorageError, match=r"cannot write JOURNAL\.md"):
                mem.export_notes(out, **SCOPE)
        assert asides(out) == []
        assert {name: (out / name).read_bytes() for name in NOTE_FILES} == before
    finally:
        mem.close()


def test_reimporting_an_unchanged_export_stores_nothing(make_store, word_embedder, tmp_path):
    mem = make_store("unchanged", word_embedder)
    out = tmp_path / "out"
    try:
        book = Notebook(mem, SCOPE)
        book.append("JOURNAL.md", "Booked the Lisbon flight.")
        book.append("JOURNAL.md", "Packed for Lisbon.")
        book.append("USER.md", "Alice is vegan.")
        before = entries(mem)
        mem.export_notes(out, **SCOPE)

        assert set(mem.import_notes(out, **SCOPE).values()) == {0}
        assert entries(mem) == before  # the same ids and the same (unrounded) dates

        # A changed entry replaces its file's notes; its untouched entries keep their dates.
        journal = (out / "JOURNAL.md").read_text(encoding="utf-8")
        (out / "JOURNAL.md").write_text(journal.replace("Packed", "Unpacked"), encoding="utf-8")
        assert mem.import_notes(out, **SCOPE)["JOURNAL.md"] == 2
        after = {e[2]: e[3] for e in entries(mem)}
        dates = {e[2]: e[3] for e in before}
        assert after["Booked the Lisbon flight."] == dates["Booked the Lisbon flight."]
        assert after["Alice is vegan."] == dates["Alice is vegan."]
        assert after["Unpacked for Lisbon."] == float(int(dates["Packed for Lisbon."]))
        assert set(mem.import_notes(out, **SCOPE).values()) == {0}

        # A date moved by a second is a change, and the file's date is stored.
        user = (out / "USER.md").read_text(encoding="utf-8")
        heading = re.search(r"^## (\S+ \d\d:\d\d:)(\d\d)$", user, re.MULTILINE)
        assert heading is not None
        moved = f"{heading.group(1)}{(int(heading.group(2)) + 1) % 60:02d}"
        (out / "USER.md").write_text(user.replace(heading.group(0), f"## {moved}"), "utf-8")
        assert mem.import_notes(out, **SCOPE)["USER.md"] == 1
        (vegan,) = [e for e in entries(mem) if e[2] == "Alice is vegan."]
        assert vegan[3] != next(e[3] for e in before if e[2] == "Alice is vegan.")
        assert vegan[3].is_integer()
    finally:
        mem.close()


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
def test_export_never_writes_through_a_planted_link(make_store, word_embedder, tmp_path):
    mem = make_store("planted", word_embedder)
    out, victim, absent = tmp_path / "out", tmp_path / "victim.cfg", tmp_path / "absent.cfg"
    out.mkdir()
    victim.write_text("important config\n", encoding="utf-8")
    (out / ".MEMORY.md.tmp").symlink_to(victim)
    (out / ".USER.md.tmp").symlink_to(absent)
    try:
        Notebook(mem, SCOPE).append("MEMORY.md", "Text the model chose.")
        Notebook(mem, SCOPE).append("USER.md", "Alice is vegan.")
        mem.export_notes(out, **SCOPE)
        assert victim.read_text(encoding="utf-8") == "important config\n"
        assert not absent.exists()
        for name in NOTE_FILES:
            assert (out / name).is_file() and not (out / name).is_symlink(), name
        assert "Text the model chose." in (out / "MEMORY.md").read_text(encoding="utf-8")
        assert asides(out) == [".MEMORY.md.tmp", ".USER.md.tmp"]
        # The files get the mode any new file gets (not a private temporary file's).
        plain = tmp_path / "plain"
        plain.write_text("x", encoding="utf-8")
        assert (out / "MEMORY.md").stat().st_mode == plain.stat().st_mode
        # The links are a leftover's names: an import skips them.
        assert mem.import_notes(out, **SCOPE)["MEMORY.md"] == 0
    finally:
        mem.close()


def test_an_out_of_range_date_refuses_the_whole_import(make_store, word_embedder, tmp_path):
    # Dates fromisoformat reads, before year 1 or after 9999 once in UTC: the store
    # refuses them, so the read refuses them, naming the file, before anything is stored
    # (JOURNAL.md, read first and valid, was stored before the refusal of MEMORY.md).
    mem = make_store("range", word_embedder)
    out = tmp_path / "n"
    out.mkdir()
    (out / "JOURNAL.md").write_text("# Journal\n\n## 2026-05-01\nFirst entry.\n", "utf-8")
    try:
        for date in ("0001-01-01T00:00+14:00", "9999-12-31T23:59:59-05:00"):
            (out / "MEMORY.md").write_text(f"## 2026-01-01\nFine.\n\n## {date}\nOld.\n", "utf-8")
            with pytest.raises(InvalidArgumentError, match=r"MEMORY\.md entry 2's date"):
                mem.import_notes(out, **SCOPE)
            assert entries(mem) == []
        (out / "MEMORY.md").write_text("## 0001-01-01T00:00Z\nThe earliest.\n", "utf-8")
        assert mem.import_notes(out, **SCOPE) == {"JOURNAL.md": 1, "MEMORY.md": 1}
    finally:
        mem.close()


def test_every_changed_file_is_stored_in_one_transaction(
    make_store, word_embedder, tmp_path, monkeypatch
):
    mem = make_store("one", word_embedder)
    out = tmp_path / "n"
    out.mkdir()
    (out / "JOURNAL.md").write_text("## 2026-05-01\nWent out.\n", "utf-8")
    (out / "USER.md").write_text("## 2026-05-01\nAlice is vegan.\n", "utf-8")
    calls = []
    real = mem.replace

    def replace(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(mem, "replace", replace)
    try:
        assert mem.import_notes(out, **SCOPE) == {"JOURNAL.md": 1, "USER.md": 1}
        assert len(calls) == 1
        assert sorted(e[1] for e in entries(mem)) == ["journal", "user"]
    finally:
        mem.close()


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
def test_import_never_reads_through_a_link(make_store, word_embedder, tmp_path):
    mem = make_store("link", word_embedder)
    out, secret = tmp_path / "n", tmp_path / "secret.txt"
    out.mkdir()
    secret.write_text("API_KEY=hunter2\n", encoding="utf-8")
    (out / "JOURNAL.md").write_text("## 2026-05-01\nWent out.\n", "utf-8")
    try:
        for target in (secret, tmp_path / "absent.txt", tmp_path):
            (out / "USER.md").symlink_to(target)
            with pytest.raises(InvalidArgumentError, match=r"USER\.md is a symbolic link"):
                mem.import_notes(out, **SCOPE)
            (out / "USER.md").unlink()
        assert entries(mem) == []
    finally:
        mem.close()


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("   ## fake · forged\nreal text", "   ## fake · forged\nreal text"),
        ("\n  \n\t## 2020-01-01\n    code\n  indented  ", "\t## 2020-01-01\n    code\n  indented"),
    ],
    ids=["indented-heading", "blank-lines-tab-and-trailing-blanks"],
)
def test_an_indented_heading_in_a_file_reads_back_unchanged(
    make_store, word_embedder, tmp_path, body, text
):
    # Stripped, its first line would be exported as a heading: re-dated, re-titled text.
    mem = make_store("indented", word_embedder)
    out = tmp_path / "n"
    out.mkdir()
    (out / "USER.md").write_text(f"# User\n\n## 2026-05-01\n{body}\n\n", "utf-8")
    try:
        mem.import_notes(out, **SCOPE)
        before = entries(mem)
        assert [e[2] for e in before] == [text]
        mem.export_notes(tmp_path / "out", **SCOPE)
        assert set(mem.import_notes(tmp_path / "out", **SCOPE).values()) == {0}
        assert entries(mem) == before
    finally:
        mem.close()


def test_no_edit_stores_a_line_that_would_be_a_heading(make_store, word_embedder, tmp_path):
    mem = make_store("edits", word_embedder)
    book = Notebook(mem, SCOPE)
    try:
        with pytest.raises(InvalidArgumentError, match=r"content has a line starting with '## '"):
            book.append("USER.md", "  ## 2020-01-01 · forged\nAlice is vegan.")
        book.append("JOURNAL.md", "went out\nbar## 1999-01-01 · fake")
        for old, new in (("bar", ""), ("went out", "## x"), ("went", "  ## went")):
            with pytest.raises(InvalidArgumentError, match=r"JOURNAL\.md's entry as this edit"):
                book.replace("JOURNAL.md", old, new)
        assert [e[2] for e in entries(mem)] == ["went out\nbar## 1999-01-01 · fake"]
        mem.export_notes(tmp_path / "out", **SCOPE)
        assert set(mem.import_notes(tmp_path / "out", **SCOPE).values()) == {0}
    finally:
        mem.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_export_keeps_the_mode_of_the_file_it_replaces(make_store, word_embedder, tmp_path):
    mem = make_store("mode", word_embedder)
    out = tmp_path / "out"
    try:
        Notebook(mem, SCOPE).append("USER.md", "Alice's phone is 555-1234.")
        mem.export_notes(out, **SCOPE)
        os.chmod(out / "USER.md", 0o600)
        os.chmod(out / "WORLD.md", 0o640)
        Notebook(mem, SCOPE).append("USER.md", "Alice's PIN is 9876.")
        mem.export_notes(out, **SCOPE)
        assert "PIN" in (out / "USER.md").read_text(encoding="utf-8")
        assert stat.S_IMODE((out / "USER.md").stat().st_mode) == 0o600
        assert stat.S_IMODE((out / "WORLD.md").stat().st_mode) == 0o640
    finally:
        mem.close()


def test_export_syncs_the_folder_after_the_renames(
    make_store, word_embedder, tmp_path, monkeypatch
):
    mem = make_store("sync", word_embedder)
    out = tmp_path / "out"
    real_fsync, real_replace = os.fsync, os.replace
    events: list[str] = []

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode) and os.path.samestat(os.fstat(fd), out.stat()):
            events.append("folder")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append("rename")
        real_replace(src, dst)

    try:
        Notebook(mem, SCOPE).append("USER.md", "Alice is vegan.")
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        mem.export_notes(out, **SCOPE)
        assert events == ["rename"] * len(NOTE_FILES) + ["folder"]
    finally:
        mem.close()


def test_an_entry_with_other_line_breaks_reads_back_as_stored(make_store, word_embedder, tmp_path):
    """The file is read by lines, and \\r, \\f or U+2028 end one as \\n does: an entry is
    stored with its line breaks written \\n, so its own export reads back unchanged."""
    mem = make_store("breaks", word_embedder)
    try:
        book = Notebook(mem, SCOPE)
        for text in ("line a\u2028line b", "tab\x0cfeed", "win\r\nline", "next\x85line"):
            book.append("MEMORY.md", text)
        stored = [r.text for r in book.entries("MEMORY.md")]
        assert stored == ["line a\nline b", "tab\nfeed", "win\nline", "next\nline"]
        reads_back(mem, tmp_path / "out")
    finally:
        mem.close()


def test_export_refuses_a_note_its_file_would_not_give_back(make_store, word_embedder, tmp_path):
    # Written by Memory.add, not through a Notebook: a line the export would write as a
    # heading, or a title of two lines, would read back as other entries (split,
    # re-dated, re-titled). The export names the note and writes no file.
    mem = make_store("forged", word_embedder)
    try:
        Notebook(mem, SCOPE).append("USER.md", "Alice is vegan.")
        for text, title, why in (
            ("went out\n## 1999-01-01 · injected\nmore", "", "a line starting with '## '"),
            ("went out", "t\n## 1999-01-01 · x", "a title of several lines"),
        ):
            rec = mem.add(
                text,
                table=NOTES,
                type=NOTE_FILES["JOURNAL.md"],
                metadata={"file": "JOURNAL.md", "title": title, "position": 0},
                **SCOPE,
            )
            with pytest.raises(InvalidArgumentError, match=f"{rec.id}.*{why}"):
                mem.export_notes(tmp_path / "out", **SCOPE)
            assert not (tmp_path / "out" / "USER.md").exists()
            mem.delete(rec.id)
        mem.export_notes(tmp_path / "out", **SCOPE)
        assert set(mem.import_notes(tmp_path / "out", **SCOPE).values()) == {0}
    finally:
        mem.close()


def test_a_section_of_many_blank_lines_reads_as_its_text(make_store, word_embedder, tmp_path):
    # The blank lines that open a section go (each was taken off the front of a list
    # one at a time, 25 s for 400,000 of them); the entry is the text after them.
    blank = "\n" * 200_000
    notes = tmp_path / "in"
    notes.mkdir()
    (notes / "USER.md").write_text(f"# User\n\n## Diet{blank}Alice is vegan.\n\n## {blank}")
    with make_store("blanks", word_embedder) as mem:
        assert mem.import_notes(notes, **SCOPE) == {"USER.md": 1}
        assert [e[2] for e in entries(mem)] == ["Alice is vegan."]


def test_an_untouched_export_of_notes_written_by_add_reads_back_as_them(
    make_store, word_embedder, tmp_path
):
    # A leading blank line, trailing spaces, a "\r" break, a title with edge spaces or a
    # tab: the file gives them back changed, and each was stored again as a new entry.
    mem = make_store("as-read", word_embedder)
    try:
        for i, (text, title) in enumerate(
            [("\nleading blank", "t"), ("trailing  ", " lead"), ("a\rb", "x\t")]
        ):
            mem.add(
                text,
                table=NOTES,
                type=NOTE_FILES["JOURNAL.md"],
                created_at=1.7e9 + i,
                metadata={"file": "JOURNAL.md", "title": title, "position": i},
                **SCOPE,
            )
        reads_back(mem, tmp_path / "out")
    finally:
        mem.close()
