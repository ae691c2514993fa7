"""``export_daily``'s files under attack: a record's ``metadata["date"]`` is anyone's who
writes the room's scope, so only a real ``YYYY-MM-DD`` names a file (any other date is
``created_at``'s day, and the file stays in ``memory/``); each file is written aside under
a random name without following a link, keeps the permissions of the file it replaces,
and the folder is synced after the renames."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from memlane import Memory
from memlane.agent.daily import DAILY, append_daily, export_daily
from memlane.scoping import EventScope

MAY_1 = 1777593600.0  # 2026-05-01 00:00 UTC
EVENT = EventScope(
    fields={"agent_id": "helper", "user_id": "mallory"},
    identity="mallory",
    contact="x:1",
    source="x",
    room_id="r1",
)


def planted(mem: Memory, text: str, date: object, created_at: float = MAY_1 + 3600) -> None:
    """A record of the room's daily table as any writer of its scope may store it."""
    mem.add(
        text,
        table=DAILY,
        type="daily_entry",
        metadata={"date": date},
        created_at=created_at,
        **EVENT.history,
    )


def test_only_a_real_date_names_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "USER.md").write_text("## 2026-05-01\nAlice is vegan.\n", encoding="utf-8")
    bad = ["../USER", str(tmp_path / "absolute"), "2026-02-30", "20260501", "2026-5-1"]
    arabic = "".join(chr(0x660 + int(c)) if c.isdigit() else c for c in "2026-05-01")
    bad += [arabic, 20260501, None]  # digits \d matches too, not a str, none
    with Memory(None, embedder=None) as mem:
        append_daily(mem, "Normal entry.", EVENT, category="task", created_at=MAY_1 + 60)
        for date in bad:
            planted(mem, f"dated {date!r}", date)
        planted(mem, "A real date.", "2026-04-30")
        files = export_daily(mem, data, EVENT)
    assert [f.name for f in files] == ["2026-04-30.md", "2026-05-01.md"]
    assert sorted(p.name for p in (data / "memory").iterdir()) == [f.name for f in files]
    assert sorted(p.name for p in data.iterdir()) == ["USER.md", "memory"]
    assert (data / "USER.md").read_text(encoding="utf-8") == "## 2026-05-01\nAlice is vegan.\n"
    may_1 = files[1].read_text(encoding="utf-8")
    assert "Normal entry." in may_1 and all(f"dated {d!r}" in may_1 for d in bad)
    assert not (tmp_path / "absolute.md").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
def test_a_planted_link_is_never_written_through(tmp_path: Path) -> None:
    data, victim = tmp_path / "data", tmp_path / "victim.txt"
    (data / "memory").mkdir(parents=True)
    victim.write_text("precious\n", encoding="utf-8")
    # The names earlier versions wrote aside under.
    (data / "memory" / ".2026-05-01.md.tmp").symlink_to(victim)
    with Memory(None, embedder=None) as mem:
        append_daily(mem, "Entry.", EVENT, created_at=MAY_1)
        (written,) = export_daily(mem, data, EVENT)
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert "Entry." in written.read_text(encoding="utf-8") and not written.is_symlink()
    left = sorted(p.name for p in (data / "memory").iterdir())
    assert left == [".2026-05-01.md.tmp", "2026-05-01.md"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    with Memory(None, embedder=None) as mem:
        append_daily(mem, "Entry.", EVENT, created_at=MAY_1)
        (first,) = export_daily(mem, tmp_path, EVENT)
        os.chmod(first, 0o600)
        append_daily(mem, "Private entry.", EVENT, created_at=MAY_1 + 60)
        (again,) = export_daily(mem, tmp_path, EVENT)
    assert "Private entry." in again.read_text(encoding="utf-8")
    assert stat.S_IMODE(again.stat().st_mode) == 0o600


def test_the_folder_is_synced_after_the_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "memory"
    real_fsync, real_replace = os.fsync, os.replace
    events: list[str] = []

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode) and os.path.samestat(os.fstat(fd), folder.stat()):
            events.append("folder")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append("rename")
        real_replace(src, dst)

    with Memory(None, embedder=None) as mem:
        append_daily(mem, "Day one.", EVENT, created_at=MAY_1)
        append_daily(mem, "Day two.", EVENT, created_at=MAY_1 + 86400)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        assert len(export_daily(mem, tmp_path, EVENT)) == 2
    assert events == ["rename", "rename", "folder"]
