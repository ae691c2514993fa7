"""OrcBot's long-term files on both backends, with real files: export -> import into a fresh
store gives the same notes, importing again stores nothing, a changed file updates its kind,
build_context shows the newest notes within OrcBot's limits, scopes stay apart, and bad input
raises before anything is stored."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memlane import AsyncMemory, InvalidArgumentError, Memory, NotFoundError
from memlane.agent import build_context, char_token_count
from memlane.notes import NOTE_FILES, NOTE_LIMITS, NOTES, notes_context, scope_notes

FILES = {
    "JOURNAL.md": (
        "# Journal\n\nStarted keeping a journal.\n\n"
        "## 2026-05-01 09:30\nHelped Alice plan a trip to Lisbon.\n\n"
        "## 2026-05-03T18:00:00Z\nAlice's flight moved to Friday.\nShe asked for a reminder.\n\n"
        "## Lessons\nConfirm dates twice.\n"
    ),
    "LEARNING.md": "## 2026-04-30 · Python\nPrefer pathlib to os.path.\n",
    "USER.md": "# User\n\n## 2026-04-01\nAlice is vegan and likes jazz — café au lait.\n",
    "WORLD.md": "",
    "MEMORY.md": "## 2026-04-02\nThe team meets on Mondays.\n\n## 2026-04-03\nBudget: 500 €.\n",
}


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def notes(mem: Memory, **scope: str) -> list[tuple[str, str, str, float, int]]:
    """Every note of exactly the scope: kind, title, text, date, position."""
    only = {f: None for f in ("user_id", "session_id") if f not in scope}
    recs = mem.list(NOTES, limit=1000, filters=only, **scope)
    out = [
        (r.type, r.metadata["title"], r.text, r.created_at, r.metadata["position"]) for r in recs
    ]
    return sorted(out, key=lambda n: (n[0], n[4]))


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_round_trip_into_a_fresh_store(make_store, word_embedder, tmp_path):
    source = write(tmp_path / "source", FILES)
    mem = make_store("notes", word_embedder)
    fresh = make_store("fresh", word_embedder)
    try:
        stored = mem.import_notes(source, agent_id="a")
        assert stored == {
            "JOURNAL.md": 4,
            "LEARNING.md": 1,
            "USER.md": 1,
            "WORLD.md": 0,
            "MEMORY.md": 2,
        }
        first = notes(mem, agent_id="a")
        journal = [n for n in first if n[0] == "journal"]
        assert [n[2] for n in journal] == [
            "Started keeping a journal.",
            "Helped Alice plan a trip to Lisbon.",
            "Alice's flight moved to Friday.\nShe asked for a reminder.",
            "Confirm dates twice.",
        ]
        assert journal[1][3] == ts("2026-05-01 09:30") and journal[2][3] == ts("2026-05-03 18:00")
        assert journal[3][1] == "Lessons" and journal[0][1] == ""
        assert [n[1:3] for n in first if n[0] == "learning"] == [
            ("Python", "Prefer pathlib to os.path.")
        ]

        out = tmp_path / "out"
        assert mem.export_notes(out, agent_id="a") == stored
        assert sorted(p.name for p in out.iterdir()) == sorted(NOTE_FILES)
        journal_md = (out / "JOURNAL.md").read_text(encoding="utf-8")
        assert journal_md.startswith("# Journal\n\n")
        assert journal_md.index("## 2026-05-01 09:30:00\n\nHelped Alice") < journal_md.index(
            "## 2026-05-03 18:00:00\n\nAlice's flight"
        )
        assert " · Lessons\n\nConfirm dates twice." in journal_md
        assert (out / "WORLD.md").read_text(encoding="utf-8") == "# World\n"

        assert fresh.import_notes(out, agent_id="a") == stored
        assert notes(fresh, agent_id="a") == first
        again = tmp_path / "again"
        fresh.export_notes(again, agent_id="a")
        for name in NOTE_FILES:
            assert (again / name).read_bytes() == (out / name).read_bytes(), name
        # The exported files read back into the store they came from: nothing changes.
        assert set(mem.import_notes(out, agent_id="a").values()) == {0}
        assert notes(mem, agent_id="a") == first
    finally:
        mem.close()
        fresh.close()


def test_reimport_is_idempotent_and_changes_update(make_store, word_embedder, tmp_path):
    folder = write(tmp_path / "notes", FILES)
    mem = make_store("idem", word_embedder)
    try:
        mem.import_notes(folder, agent_id="a")
        ids = {r.id for r in mem.list(NOTES, limit=100)}
        before = notes(mem, agent_id="a")
        assert set(mem.import_notes(folder, agent_id="a").values()) == {0}
        assert {r.id for r in mem.list(NOTES, limit=100)} == ids
        assert notes(mem, agent_id="a") == before

        # A changed journal replaces the journal notes; undated entries keep their dates.
        edited = FILES["JOURNAL.md"].replace("Confirm dates twice.", "Confirm dates thrice.")
        edited += "\n## 2026-05-04\nBooked the hotel.\n"
        (folder / "JOURNAL.md").write_text(edited, encoding="utf-8")
        (folder / "MEMORY.md").unlink()  # absent: the memory notes stay
        stored = mem.import_notes(folder, agent_id="a")
        assert stored == {"JOURNAL.md": 5, "LEARNING.md": 0, "USER.md": 0, "WORLD.md": 0}
        after = notes(mem, agent_id="a")
        journal = [n for n in after if n[0] == "journal"]
        assert [n[2] for n in journal][-2:] == ["Confirm dates thrice.", "Booked the hotel."]
        assert "Confirm dates twice." not in [n[2] for n in after]
        assert journal[0][3] == next(n[3] for n in before if n[2] == "Started keeping a journal.")
        assert [n for n in after if n[0] != "journal"] == [n for n in before if n[0] != "journal"]
        assert set(mem.import_notes(folder, agent_id="a").values()) == {0}
        # An emptied file empties its kind.
        (folder / "LEARNING.md").write_text("# Learning\n", encoding="utf-8")
        assert mem.import_notes(folder, agent_id="a")["LEARNING.md"] == 0
        assert mem.count(NOTES, type="learning") == 0
    finally:
        mem.close()


def test_context_shows_the_newest_notes_within_orcbot_limits(make_store, word_embedder, tmp_path):
    entries = [
        f"## 2026-01-{d:02d}\nDay {d}: worked on the garden shed and wrote it down."
        for d in range(1, 31)
    ]
    memory = [
        f"## 2025-12-{d:02d}\nLasting fact {d}: the shed is painted green." for d in range(1, 31)
    ]
    files = {"JOURNAL.md": "\n\n".join(entries), "MEMORY.md": "\n\n".join(memory)}
    folder = write(tmp_path / "long", files)
    mem = make_store("context", word_embedder)
    try:
        mem.import_notes(folder, agent_id="a")
        mem.add("Alice paints sheds", agent_id="a", user_id="alice")
        scope = {"agent_id": "a", "user_id": "alice"}
        ctx = build_context(mem, "shed", scope, 4000, count_tokens=char_token_count, min_score=None)
        assert ctx.text.startswith("## Long-term notes\n### JOURNAL.md\n")
        text = "\n".join(ctx.sections["notes"])
        journal, memory_part = text.split("### MEMORY.md\n")
        journal_lines = journal.splitlines()[1:]
        assert len("\n".join(journal_lines)) <= NOTE_LIMITS["journal"]
        assert len(memory_part.rstrip("\n")) <= NOTE_LIMITS["memory"]
        # The newest entries, oldest first; the oldest of them cut from its start.
        assert (
            journal_lines[-1] == "[2026-01-30] Day 30: worked on the garden shed and wrote it down."
        )
        assert journal_lines[0].startswith("…") and "Day 1:" not in text
        assert memory_part.splitlines()[-1].startswith("[2025-12-30] Lasting fact 30")
        assert len("\n".join(journal_lines)) > NOTE_LIMITS["journal"] - 80  # filled
        assert "## What you remember" in ctx.text and ctx.total_tokens <= 4000
        assert char_token_count(ctx.text) <= 4000
        # Their tokens come off the budget (after the message's) before the shares.
        left = 4000 - ctx.reserved - char_token_count(ctx.text.split("\n\n## ")[0] + "\n\n")
        assert sum(v for k, v in ctx.budgets.items() if k != "notes") <= left
        assert ctx.budgets["memories"] >= ctx.tokens["memories"] > 0
        # A small budget: the notes are cut to fit, never over it.
        small = build_context(mem, "shed", scope, 100, count_tokens=char_token_count)
        assert char_token_count(small.text) <= 100
        custom = build_context(mem, "shed", scope, 4000, notes={"memory": 100}, min_score=None)
        assert "### JOURNAL.md" not in custom.text and "### MEMORY.md" in custom.text
        off = build_context(mem, "shed", scope, 4000, notes=None, min_score=None)
        assert "notes" not in off.sections and "Long-term notes" not in off.text
        with pytest.raises(InvalidArgumentError, match="unknown note kind"):
            build_context(mem, "shed", scope, 4000, notes={"diary": 10})
        with pytest.raises(InvalidArgumentError, match="must be an int from 0 to"):
            build_context(mem, "shed", scope, 4000, notes={"journal": -1})
    finally:
        mem.close()


def test_scopes_isolate(make_store, word_embedder, tmp_path):
    mem = make_store("scopes", word_embedder)
    try:
        a = write(tmp_path / "a", {"JOURNAL.md": "## 2026-01-01\nAgent A shipped the shed."})
        b = write(tmp_path / "b", {"JOURNAL.md": "## 2026-01-01\nAgent B painted the fence."})
        alice = write(tmp_path / "alice", {"USER.md": "## 2026-01-02\nAlice prefers email."})
        mem.import_notes(a, agent_id="a")
        mem.import_notes(b, agent_id="b")
        mem.import_notes(alice, agent_id="a", user_id="alice")
        # Importing A's files for B changed nothing of A's.
        assert [n[2] for n in notes(mem, agent_id="a")] == ["Agent A shipped the shed."]

        for_alice = build_context(mem, "shed", {"agent_id": "a", "user_id": "alice"}, 2000)
        assert "Agent A shipped" in for_alice.text and "Alice prefers email." in for_alice.text
        assert "Agent B" not in for_alice.text
        for_bob = build_context(mem, "shed", {"agent_id": "a", "user_id": "bob"}, 2000)
        assert "Agent A shipped" in for_bob.text and "Alice prefers" not in for_bob.text
        for_b = build_context(mem, "fence", {"agent_id": "b", "user_id": "alice"}, 2000)
        assert "Agent B painted" in for_b.text and "Agent A" not in for_b.text
        assert "Alice prefers" not in for_b.text

        out = tmp_path / "out-b"
        assert mem.export_notes(out, agent_id="b")["JOURNAL.md"] == 1
        assert "Agent A" not in (out / "JOURNAL.md").read_text(encoding="utf-8")
        assert mem.export_notes(tmp_path / "out-a", agent_id="a")["USER.md"] == 0
        # An exact scope: re-importing A's agent-level files leaves Alice's notes alone.
        empty = write(tmp_path / "empty", {"USER.md": ""})
        mem.import_notes(empty, agent_id="a")
        assert [n[2] for n in notes(mem, agent_id="a", user_id="alice")] == ["Alice prefers email."]
    finally:
        mem.close()


def test_a_conversations_notes_are_read_from_its_own_scope(make_store, word_embedder):
    """The notes a turn shows are found from the scope's own records and the broader
    ones', not by reading every note of the store (one agent, 300 users' profiles)."""
    mem = make_store("many", word_embedder, dedup_window=0)
    try:
        rows = [
            {"text": f"Profile {u}-{i}.", "table": NOTES, "type": "user", "user_id": f"u{u}"}
            for u in range(300)
            for i in range(2)
        ]
        rows.append({"text": "Agent A shipped the shed.", "table": NOTES, "type": "journal"})
        mem.add_many([{"agent_id": "a", **row} for row in rows])
        scope = {"agent_id": "a", "user_id": "u7"}
        text, shown = notes_context(mem, scope)
        assert "Profile 7-0." in text and "Profile 7-1." in text and "shipped the shed" in text
        assert len(shown) == 3
        assert mem._sync.engine.filter_stats(scope_notes(mem, scope)[0]) == (3, 3)
    finally:
        mem.close()


def test_bad_input_stores_nothing(make_store, word_embedder, tmp_path):
    mem = make_store("bad", word_embedder)
    try:
        a_file = tmp_path / "file.md"
        a_file.write_text("x", encoding="utf-8")
        with pytest.raises(InvalidArgumentError, match="is not a directory"):
            mem.import_notes(a_file)
        with pytest.raises(InvalidArgumentError, match="is not a directory"):
            mem.export_notes(a_file)
        with pytest.raises(NotFoundError, match="no directory"):
            mem.import_notes(tmp_path / "missing")
        with pytest.raises(InvalidArgumentError, match="dir must be a path"):
            mem.import_notes(3)  # type: ignore[arg-type]

        folder = write(tmp_path / "n", {"JOURNAL.md": "## 2026-01-01\nFine entry."})
        (folder / "USER.md").write_bytes(b"## 2026-01-01\nCaf\xe9 in Latin-1.\n")
        with pytest.raises(InvalidArgumentError, match=r"USER\.md is not UTF-8 text \(byte 17"):
            mem.import_notes(folder, agent_id="a")
        (folder / "USER.md").write_text("## x\nnul \x00 here", encoding="utf-8")
        with pytest.raises(InvalidArgumentError, match=r"USER\.md entry 1 contains a NUL"):
            mem.import_notes(folder, agent_id="a")
        (folder / "USER.md").unlink()
        (folder / "NOTES.md").write_text("## 2026-01-01\nWho am I?", encoding="utf-8")
        with pytest.raises(InvalidArgumentError, match=r"unknown file\(s\) \['NOTES.md'\]"):
            mem.import_notes(folder, agent_id="a")
        (folder / "NOTES.md").unlink()
        (folder / "WORLD.md").mkdir()
        with pytest.raises(InvalidArgumentError, match=r"unknown file\(s\) \['WORLD.md'\]"):
            mem.import_notes(folder, agent_id="a")
        assert mem.count(NOTES) == 0
        (folder / "WORLD.md").rmdir()
        assert mem.import_notes(folder, agent_id="a") == {"JOURNAL.md": 1}
    finally:
        mem.close()


def test_async_twins(word_embedder, tmp_path):
    folder = write(tmp_path / "n", FILES)

    async def main() -> None:
        async with AsyncMemory(tmp_path / "store", word_embedder) as mem:
            assert (await mem.import_notes(folder, agent_id="a"))["JOURNAL.md"] == 4
            written = await mem.export_notes(tmp_path / "out", agent_id="a")
            assert written["MEMORY.md"] == 2
            assert set((await mem.import_notes(tmp_path / "out", agent_id="a")).values()) == {0}

    asyncio.run(main())
