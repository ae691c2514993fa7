"""``memlane prune``, ``consolidate`` and ``reflect`` on a real store, the LLM commands
against the scripted chat-completions server on loopback."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from chat_server import ScriptedChatServer
from memlane import Memory
from memlane.agent.consolidation import SHORT_TERM, add_short_term
from memlane.cli import main

DAY = 86400.0
TEXT = ["--embedder", "none"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A text-only store: two old unimportant memories, one old important, one new, one
    old evergreen, and an old message in another table."""
    path = tmp_path / "store"
    old = time.time() - 100 * DAY
    with Memory(path, None) as mem:
        mem.add("old chatter about the weather", importance=0.2, created_at=old, user_id="alice")
        mem.add("old chatter about lunch", importance=0.3, created_at=old, user_id="bob")
        mem.add("Alice is allergic to peanuts", importance=0.9, created_at=old, user_id="alice")
        mem.add("a fresh note", importance=0.1, user_id="alice")
        mem.add("the office address", evergreen=True, importance=0.1, created_at=old)
        mem.add("old message", table="messages", importance=0.1, created_at=old)
    return path


def texts(path: Path, table: str | None = None) -> set[str]:
    with Memory(path, None) as mem:
        return {r.text for r in mem.list(table, limit=100)}


def test_prune_dry_run_then_prune(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    before = texts(store)
    args = ["prune", "--store", str(store), "--max-age-days", "30", "--keep-importance", "0.8"]
    code, out, _ = run(capsys, *args, "--dry-run")
    assert code == 0
    assert out.splitlines()[0] == "would prune 2 memories"
    assert "old chatter about the weather" in out and "old chatter about lunch" in out
    assert texts(store) == before  # nothing deleted

    code, out, _ = run(capsys, *args, "--user", "alice", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["dry_run"] is False and report["count"] == 1
    assert [r["text"] for r in report["records"]] == ["old chatter about the weather"]

    code, out, _ = run(capsys, *args)
    assert (code, out.splitlines()[0]) == (0, "pruned 1 memory")
    assert texts(store) == before - {"old chatter about the weather", "old chatter about lunch"}
    assert "old message" in texts(store, "messages")

    code, out, _ = run(
        capsys, "prune", "--store", str(store), "--max-age-days", "30", "--all-tables"
    )
    assert code == 0 and "old message" in out
    assert texts(store, "messages") == set()


def test_prune_needs_a_criterion(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, _, err = run(capsys, "prune", "--store", str(store))
    # In the command's words, its flags', not the method's parameters'.
    assert code == 1 and "give at least one of --max-age-days, --keep-importance" in err
    code, _, err = run(capsys, "prune", "--store", str(store), "--keep-importance", "2")
    assert code == 2 and "must be in [0, 1]" in err


SUMMARY = {
    "summary": "Alice planned a trip to Lisbon and asked about trains.",
    "facts": ["Alice is travelling to Lisbon in May", "Alice prefers trains to planes"],
    "pending": ["book the train"],
    "tone": "friendly",
    "preferences": ["trains"],
    "confidence": 0.9,
}


def short_term(path: Path, n: int) -> None:
    with Memory(path, None) as mem:
        for i in range(n):
            add_short_term(
                mem, f"step {i}: Alice talks about Lisbon", "trip", scope={"user_id": "alice"}
            )


def llm_args(server: ScriptedChatServer) -> list[str]:
    return ["--model", "scripted", "--base-url", server.base_url]


def test_consolidate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "store"
    short_term(path, 3)
    base = ["consolidate", "--store", str(path), *TEXT, "--user", "alice"]
    with ScriptedChatServer([json.dumps(SUMMARY)]) as server:
        code, out, _ = run(capsys, *base, *llm_args(server))  # below the threshold of 30
        assert (code, out.strip()) == (0, "skipped: 3 short-term entries, below --threshold")
        assert server.requests == []
        code, out, _ = run(capsys, *base, *llm_args(server), "--threshold", "3", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["status"] == "consolidated" and len(report["removed"]) == 3
    assert report["episodic"]["text"] == SUMMARY["summary"]
    assert report["episodic"]["user_id"] == "alice"
    assert {r["text"] for r in report["semantic"]} == set(SUMMARY["facts"])
    (request,) = server.requests
    assert request["model"] == "scripted"
    assert "step 2: Alice talks about Lisbon" in request["messages"][-1]["content"]
    assert texts(path, SHORT_TERM) == set()
    assert texts(path) == {SUMMARY["summary"], *SUMMARY["facts"]}


def test_consolidate_failure_keeps_entries(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "store"
    short_term(path, 2)
    alice = ["--user", "alice"]
    with ScriptedChatServer(["I cannot answer in JSON, sorry."]) as server:
        code, out, err = run(
            capsys, "consolidate", "--store", str(path), *TEXT, *alice, "--force", *llm_args(server)
        )
    assert code == 1 and out == ""
    assert "consolidation failed (nothing removed): ParseError" in err
    assert len(texts(path, SHORT_TERM)) == 2


def test_llm_commands_check_their_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store"
    short_term(path, 1)
    monkeypatch.delenv("MEMLANE_TEST_KEY", raising=False)
    base = ["consolidate", "--store", str(path), *TEXT, "--model", "m", "--force"]
    code, _, err = run(capsys, *base, "--api-key-env", "MEMLANE_TEST_KEY")
    assert code == 1 and "MEMLANE_TEST_KEY: that variable is not set" in err
    code, _, err = run(capsys, *base, "--base-url", "localhost:8000")
    assert code == 1 and "must start with http(s)://" in err
    code, _, err = run(capsys, "consolidate", "--store", str(path), *TEXT)
    assert code == 2 and "--model" in err
    assert len(texts(path, SHORT_TERM)) == 1


def operations(body: dict[str, Any]) -> str:
    """The model's answer, made from what it was shown: memory 1 is Alice's city."""
    shown = body["messages"][-1]["content"]
    assert "1. Alice lives in Porto" in shown
    ops = [
        {"op": "update", "memory": 1, "content": "Alice lives in Lisbon"},
        {
            "op": "remember",
            "content": "Alice works as a nurse",
            "type": "semantic",
            "importance": 0.7,
        },
        {"op": "forget", "memory": 9},
    ]
    return json.dumps({"operations": ops})


def test_reflect(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Memory(path, None) as mem:
        city = mem.add("Alice lives in Porto", user_id="alice")
    chat = tmp_path / "chat.json"
    chat.write_text(
        json.dumps(
            [
                {"role": "user", "content": "I moved from Porto to Lisbon last week."},
                {"role": "assistant", "content": "How do you like Lisbon?"},
                {
                    "role": "user",
                    "content": "Love it. The hospital where I work as a nurse is close.",
                },
            ]
        )
    )
    with ScriptedChatServer([operations]) as server:
        code, out, _ = run(
            capsys,
            "reflect",
            str(chat),
            "--store",
            str(path),
            *TEXT,
            "--user",
            "alice",
            *llm_args(server),
        )
    assert code == 0
    lines = out.splitlines()
    # Reflection supersedes: the new version has an id of its own, the old one is closed.
    assert any(
        line.startswith("updated ") and line.endswith("  Alice lives in Lisbon") for line in lines
    )
    with Memory(path, None) as mem:
        assert not mem.get(city.id).current
    assert any(
        line.startswith("remembered ") and line.endswith("Alice works as a nurse") for line in lines
    )
    assert (
        'rejected {"op": "forget", "memory": 9}: \'memory\' 9 is not a listed memory (1..1)'
        in lines
    )
    assert texts(path) == {
        "Alice lives in Porto",
        "Alice lives in Lisbon",
        "Alice works as a nurse",
    }


def test_reflect_plain_text_and_failure(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Memory(path, None) as mem:
        mem.add("Bob likes tea", user_id="bob")
    chat = tmp_path / "chat.txt"
    chat.write_text("user: I switched to coffee\n\nassistant: Noted.\n")
    with ScriptedChatServer([(400, '{"error": "bad model"}')]) as server:
        code, out, err = run(
            capsys, "reflect", str(chat), "--store", str(path), *TEXT, *llm_args(server), "--json"
        )
    assert code == 1
    assert json.loads(out)["error"].startswith("LLMError")
    assert "user: I switched to coffee" in server.requests[0]["messages"][-1]["content"]
    assert texts(path) == {"Bob likes tea"}
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    code, _, err = run(capsys, "reflect", str(empty), "--store", str(path), *TEXT, "--model", "m")
    assert code == 1 and "the conversation is empty" in err
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run(capsys, "reflect", str(deep), "--store", str(path), *TEXT, "--model", "m")
    assert code == 1 and err == f"memlane: error: {deep}: its JSON is nested too deeply\n"


def test_prune_dry_run_is_a_bool(store: Path) -> None:
    from memlane.errors import InvalidArgumentError

    with Memory(store, None) as mem:
        n = len(mem)
        with pytest.raises(InvalidArgumentError, match="dry_run must be a bool"):
            mem.prune(max_age_days=0, dry_run=1)  # type: ignore[arg-type]
        assert len(mem.prune(max_age_days=0, dry_run=True)) == 4 and len(mem) == n
