"""The ``memlane`` command line: every command through ``main([...])``, ``--json``, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from memlane import Memory
from memlane.cli import COMMANDS, build_parser, main, parse
from memlane.cli.demo import knowledge_dir
from memlane.records import SCOPE_FIELDS

RECORD_KEYS = {
    "id",
    "text",
    "table",
    "type",
    *SCOPE_FIELDS,
    "speaker",
    "importance",
    "evergreen",
    "unique",
    "metadata",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "access_count",
    "valid_to",
    "expires_at",
    "recorded_at",
    "content_hash",
}
EXPLAIN_KEYS = {
    "bm25",
    "bm25_rank",
    "bm25_context",
    "bm25_speaker",
    "date",
    "when",
    "cosine",
    "cosine_context",
    "cosine_asked",
    "vector_rank",
    "question",
    "relevance",
    "importance",
    "recency",
    "age_hours",
    "boost",
    "score",
}
# Text-only stores keep these tests fast; one test covers the default model.
TEXT = ["--embedder", "none"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    path = str(tmp_path / "store")
    args = ["--store", path, *TEXT]
    assert (
        main(
            [
                "add",
                "Alice prefers dark mode in every app",
                "--agent",
                "a1",
                "--user",
                "alice",
                "--create",
                *args,
            ]
        )
        == 0
    )
    assert main(["add", "Bob drinks green tea", "--agent", "a2", "--user", "bob", *args]) == 0
    assert main(["add", "Release checklist: tag and publish", "--agent", "a1", *args]) == 0
    capsys.readouterr()
    return path


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    expected = {"demo", "ingest", "add", "search", "list", "forget", "stats", "export", "import"}
    assert expected <= set(COMMANDS)
    for name, cmd in COMMANDS.items():
        assert name in out
        assert cmd.help and "\n" not in cmd.help
        assert cmd.help.split()[0] in out


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name in COMMANDS:
        code, out, _ = run(capsys, name, "--help")
        assert code == 0
        assert out.startswith(f"usage: memlane {name}")


def test_console_script_and_module(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memlane", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "search" in out
    res = subprocess.run(
        [sys.executable, "-m", "memlane", "list", "--store", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"memlane: error: no memlane store at {tmp_path / 'nope'}"
    ]
    assert "Traceback" not in res.stderr


def test_add_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    doc = run_json(
        capsys,
        "add", "one", "two", "--store", store, *TEXT, "--create",
        "--agent", "a", "--meta", "source=cli", "--meta", "n=3", "--importance", "0.9",
    )  # fmt: skip
    records = doc["records"]
    assert [r["text"] for r in records] == ["one", "two"]
    for r in records:
        assert set(r) == RECORD_KEYS | {"duplicate", "duplicate_of"}
        assert r["agent_id"] == "a" and r["metadata"] == {"source": "cli", "n": 3}
        assert r["importance"] == 0.9
    doc = run_json(capsys, "add", "one", "--unique", "--agent", "a", "--store", store, *TEXT)
    assert doc["records"][0]["duplicate"] == "exact"
    assert doc["records"][0]["duplicate_of"] == records[0]["id"]


def test_add_plain_prints_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "add", "hello", "--store", str(tmp_path / "s"), *TEXT, "--create")
    assert code == 0 and err == f"memlane: creating a new store at {tmp_path / 's'}\n"
    assert len(out.split()) == 1 and len(out.strip()) == 36


def test_add_from_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\n\nsecond line\n"))
    doc = run_json(capsys, "add", "-", "third", "--store", str(tmp_path / "s"), *TEXT, "--create")
    assert [r["text"] for r in doc["records"]] == ["first line", "second line", "third"]


def test_search_json_shape(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "search", "dark mode", "--store", store, *TEXT, "--k", "2")
    assert set(doc) == {"query", "mode", "k", "seconds", "hits"}
    assert doc["query"] == "dark mode" and doc["mode"] == "hybrid" and doc["k"] == 2
    assert 1 <= len(doc["hits"]) <= 2
    hit = doc["hits"][0]
    assert set(hit) == {"score", "explain", "record"}
    assert set(hit["explain"]) == EXPLAIN_KEYS
    assert set(hit["record"]) == RECORD_KEYS
    assert hit["record"]["text"] == "Alice prefers dark mode in every app"


def test_search_scope_and_plain(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "search", "tea", "--store", store, *TEXT, "--agent", "a1")
    assert all(h["record"]["agent_id"] == "a1" for h in doc["hits"])
    assert "Bob drinks green tea" not in [h["record"]["text"] for h in doc["hits"]]
    code, out, _ = run(capsys, "search", "tea", "--store", store, *TEXT, "--explain")
    assert code == 0
    assert "Bob drinks green tea" in out and "bm25=" in out and "result(s) in" in out


def test_search_modes(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "search", "release", "--store", store, *TEXT, "--mode", "text")
    assert doc["mode"] == "text" and doc["hits"][0]["record"]["text"].startswith("Release")
    code, _, err = run(capsys, "search", "x", "--store", store, *TEXT, "--mode", "vector")
    assert code == 1 and err.startswith("memlane: error: vector search")


def test_list_and_forget(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "list", "--store", store, *TEXT)
    assert set(doc) == {"total", "records"} and doc["total"] == 3
    assert doc["records"][0]["text"].startswith("Release")  # newest first
    doc = run_json(capsys, "list", "--store", store, *TEXT, "--user", "bob")
    assert doc["total"] == 1
    victim = doc["records"][0]["id"]
    assert run_json(capsys, "forget", victim, "--store", store, *TEXT) == {"deleted": [victim]}
    assert run_json(capsys, "list", "--store", store, *TEXT)["total"] == 2
    code, out, err = run(capsys, "forget", victim, "--store", store, *TEXT)
    assert code == 1 and out == ""
    assert err == f"memlane: error: no memory with id {victim} (nothing deleted)\n"
    code, out, _ = run(capsys, "list", "--store", store, *TEXT, "--oldest-first", "--limit", "1")
    assert code == 0 and "Alice" in out and "1 of 2 shown" in out


def test_stats(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "stats", "--store", store, *TEXT)
    assert set(doc) == {"store", "records", "tables", "scopes", "queued", "embedder", "disk"}
    assert doc["records"] == 3 and doc["tables"] == {"memories": 3}
    assert doc["queued"] == 0
    assert doc["embedder"] is None
    counts = {(s["agent_id"], s["user_id"]): s["count"] for s in doc["scopes"]}
    assert counts == {("a1", "alice"): 1, ("a2", "bob"): 1, ("a1", None): 1}
    assert all(set(s) == {"table", *SCOPE_FIELDS, "count"} for s in doc["scopes"])
    disk = doc["disk"]
    assert set(disk) == {"total_bytes", "database_bytes", "index_bytes", "files"}
    assert disk["database_bytes"] > 0 and disk["index_bytes"] > 0
    code, out, _ = run(capsys, "stats", "--store", store, *TEXT)
    assert code == 0 and "agent=a1 user=alice" in out and "text only" in out
    assert "queued    0 upkeep job(s)" in out
    # Jobs accepted and not yet done (the agent's durable upkeep) are counted.
    with Memory(store, None) as mem:
        mem.jobs.put("reflect:room-1", "{}")
        mem.jobs.put("consolidate:alice", "{}")
    assert run_json(capsys, "stats", "--store", store, *TEXT)["queued"] == 2


def test_export_import_roundtrip(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = str(tmp_path / "dump.jsonl")
    assert run_json(capsys, "export", dump, "--store", store, *TEXT) == {
        "exported": 3,
        "file": dump,
    }
    lines = Path(dump).read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["id"] for x in lines)
    other = str(tmp_path / "other")
    # A missing store is refused without --create, as `add` does.
    code, _, err = run(capsys, "import", dump, "--store", other, *TEXT)
    assert code == 1 and "--create" in err and not Path(other).exists()
    assert run_json(capsys, "import", dump, "--store", other, *TEXT, "--create")["imported"] == 3
    assert (
        run_json(capsys, "import", dump, "--store", other, *TEXT, "--skip-existing")["imported"]
        == 0
    )
    code, _, err = run(capsys, "import", dump, "--store", other, *TEXT)
    assert code == 1 and err.startswith("memlane: error:") and err.count("\n") == 1
    assert "--skip-existing" in err and "on_conflict" not in err
    code, _, err = run(capsys, "import", str(tmp_path / "none.jsonl"), "--store", other, *TEXT)
    assert code == 1 and "no such file" in err
    before = run_json(capsys, "list", "--store", store, *TEXT)["records"]
    after = run_json(capsys, "list", "--store", other, *TEXT)["records"]
    assert before == after


def test_ingest_and_knowledge_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    doc = run_json(capsys, "ingest", store, str(knowledge_dir()), "--shared", *TEXT, "--create")
    assert set(doc) == {
        "ok", "seen", "ingested", "unchanged", "replaced", "failed", "skipped", "pruned",
        "limited", "fragments", "truncated", "seconds",
    }  # fmt: skip
    assert doc["ok"] and doc["seen"] == len(doc["ingested"]) >= 2 and doc["fragments"] > 0
    again = run_json(capsys, "ingest", str(knowledge_dir()), "--shared", "--store", store, *TEXT)
    assert len(again["unchanged"]) == doc["seen"] and again["fragments"] == 0
    hits = run_json(
        capsys, "search", "reciprocal rank fusion", "--knowledge", "--agent", "bot",
        "--store", store, *TEXT,
    )["hits"]  # fmt: skip
    assert hits and hits[0]["record"]["table"] == "fragments"
    code, out, _ = run(
        capsys, "ingest", str(knowledge_dir()), "--agent", "bot", "--store", store, *TEXT
    )
    assert code == 0 and "ingested" in out


def test_ingest_failures_exit_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nA fine document.\n")
    (folder / "bad.pdf").write_bytes(b"not a pdf at all")
    store = str(tmp_path / "s")
    code, out, _ = run(
        capsys, "ingest", store, str(folder), "--shared", *TEXT, "--json", "--create"
    )
    doc = json.loads(out)
    assert (
        code == 1 and not doc["ok"] and "bad.pdf" in doc["failed"] and "good.md" in doc["ingested"]
    )
    code, _, err = run(capsys, "ingest", str(tmp_path / "missing"), "--shared", "--store", store)
    assert code == 1 and "no such file or folder" in err


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "missing")
    for argv in (["search", "x"], ["list"], ["stats"], ["forget", "id"], ["export", "f"]):
        code, out, err = run(capsys, *argv, "--store", missing)
        assert code == 1 and out == ""
        assert err == f"memlane: error: no memlane store at {missing}\n"
        assert not Path(missing).exists()
    code, out, err = run(capsys, "list", "--store", missing, "--json")
    assert code == 1
    assert json.loads(out) == {
        "error": {"type": "NotFoundError", "message": f"no memlane store at {missing}"}
    }
    store = str(tmp_path / "s")
    code, _, err = run(capsys, "add", "x", "--importance", "2", "--store", store, *TEXT)
    assert code == 2 and "--importance: must be in [0, 1], got 2" in err
    code, _, err = run(capsys, "add", "x", "--meta", "novalue", "--store", store, *TEXT)
    assert code == 2 and "KEY=VALUE" in err
    assert not Path(store).exists()


def test_store_mismatch_is_one_line(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The store is text only; adding with the default model is refused, in one line.
    code, _, err = run(capsys, "add", "x", "--store", store, "--embedder", "onnx")
    assert code == 1 and err.startswith("memlane: error: the store") and err.count("\n") == 1
    assert "leave out --embedder" in err
    # Without --embedder, the store's own (none) is used.
    assert run(capsys, "add", "x", "--store", store)[0] == 0


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys)[0] == 2
    assert run(capsys, "nope")[0] == 2
    assert run(capsys, "search", "x", "--store", "s", "--mode", "bogus")[0] == 2
    assert run(capsys, "ingest", "p", "--store", "s")[0] == 2  # --agent or --shared
    for argv in (
        ["search", "x", "--k", "0"],
        ["search", "x", "--k", "two"],
        ["list", "--limit", "0"],
        ["list", "--offset", "-1"],
        ["list", "--where", "novalue"],
        ["list", "--filter", "{not json"],
        ["list", "--filter", "[1, 2]"],
        # JSON deeper than Python's parser recurses: a usage error, not a traceback.
        ["list", "--where", "k=" + "[" * 3000 + "]" * 3000],
        ["list", "--filter", '{"k": ' + "[" * 3000 + "]" * 3000 + "}"],
        ["add", "x", "--meta", "k=" + "[" * 3000 + "]" * 3000],
        ["search", "x", "--embedder", "openai:"],
        ["search", "x", "--embedder", "openai:m@ftp://host"],
        ["search", "x", "--embedder", "no/such/model.onnx"],
        ["demo", "--k", "0"],
    ):
        code, out, err = run(capsys, *argv, "--store", "s")
        assert code == 2 and out == "" and "usage: memlane" in err, argv
        assert not Path("s").exists()


def test_deep_json_is_a_usage_error_whatever_the_recursion_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A library may raise the limit (a test framework does); the answer stays the same.
    deep = "[" * 3000 + "]" * 3000
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        for argv in (
            ["list", "--where", f"k={deep}"],
            ["list", "--filter", f'{{"k": {deep}}}'],
            ["add", "x", "--meta", f"k={deep}"],
        ):
            code, out, err = run(capsys, *argv, "--store", "s")
            assert code == 2 and out == "" and "nested too deeply" in err, argv[:2]
            assert not Path("s").exists()
    finally:
        sys.setrecursionlimit(limit)
    # Brackets inside a JSON string are text, not nesting.
    code, _, err = run(capsys, "list", "--where", 'k="' + "[" * 3000 + '"', "--store", "s")
    assert "nested too deeply" not in err


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    from memlane.errors import NotFoundError

    with pytest.raises(NotFoundError):
        main(["--debug", "list", "--store", str(tmp_path / "missing")])
    with pytest.raises(NotFoundError):
        main(["list", "--store", str(tmp_path / "missing"), "--debug"])


def test_store_from_environment(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMLANE_STORE", store)
    assert parse(["list"]).store == store
    code, out, _ = run(capsys, "list", *TEXT)
    assert code == 0 and "3 of 3 shown" in out


def test_default_model_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    run_json(
        capsys, "add", "Alice prefers dark mode", "Bob likes tea", "--store", store, "--create"
    )
    hits = run_json(capsys, "search", "which display theme?", "--store", store, "--mode", "vector")
    assert hits["hits"][0]["record"]["text"] == "Alice prefers dark mode"
    assert hits["hits"][0]["explain"]["cosine"] > 0.2
    emb = run_json(capsys, "stats", "--store", store)["embedder"]
    assert emb["dimension"] == 384 and emb["name"].startswith("onnx:")


def test_the_documented_record_keys_are_a_records(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    listed = re.search(r"record is `\{(.*?)\}`", text, re.S)
    assert listed is not None
    record = run_json(capsys, "list", store, *TEXT, "--limit", "1")["records"][0]
    assert re.findall(r'"(\w+)"', listed.group(1)) == list(record)


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keep = tmp_path / "demo"
    code, out, _ = run(capsys, "demo", "--k", "2", "--keep", str(keep))
    assert code == 0
    for part in ("1. shared knowledge", "2. memories", "3. hybrid search", "4. scoped recall"):
        assert part in out
    assert "5. knowledge search" in out and "6. why" in out and "7. a repeated question" in out
    assert "[fragments]" in out and "agent=assistant user=bob" in out
    assert "\\n" not in out  # a line break is printed as one, not escaped
    stats = run_json(capsys, "stats", "--store", str(keep))
    assert stats["tables"]["fragments"] > 0 and stats["tables"]["documents"] >= 3
    assert {s["agent_id"] for s in stats["scopes"] if s["table"] == "memories"} == {
        "assistant",
        "ops-bot",
    }
    assert {s["user_id"] for s in stats["scopes"] if s["table"] == "memories"} == {"alice", "bob"}


# -- naming a store, creating one, notes -------------------------------------------------------

build_parser()  # registers every command
STORE_COMMANDS = sorted(name for name, cmd in COMMANDS.items() if cmd.store)


@pytest.mark.parametrize("name", STORE_COMMANDS)
def test_every_store_command_takes_the_store_first(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, name, "--help")
    assert code == 0
    # Help lists the positionals in order: STORE first, then the command's own.
    assert out.split("positional arguments:\n")[1].split()[0] == "STORE", out
    assert "[--store STORE]" in out and "$MEMLANE_STORE" in out


def test_the_store_as_argument_or_option(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMLANE_STORE", raising=False)
    assert run_json(capsys, "stats", store, *TEXT)["records"] == 3
    doc = run_json(capsys, "search", store, "green tea", *TEXT, "--k", "1")
    assert (
        doc["query"] == "green tea" and doc["hits"][0]["record"]["text"] == "Bob drinks green tea"
    )
    # --store in its place: every argument is the command's own.
    args = parse(["add", "one", "two", "--store", store])
    assert (args.store, args.text) == (store, ["one", "two"])
    args = parse(["add", store, "one", "two"])
    assert (args.store, args.text) == (store, ["one", "two"])
    args = parse(["get", "--store=" + store, "id-1"])
    assert (args.store, args.ids) == (store, ["id-1"])
    # Named twice, or not at all: a usage error that says so.
    code, out, err = run(capsys, "list", store, "--store", store)
    assert code == 2 and out == "" and "the store is named twice" in err
    code, _, err = run(capsys, "stats")
    assert code == 2 and "the following arguments are required: STORE" in err
    code, _, err = run(capsys, "search", store)
    assert code == 2 and "the following arguments are required: QUERY" in err


def test_the_store_from_the_environment_or_the_argument(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    other = str(tmp_path / "other")
    assert main(["add", other, "only here", *TEXT, "--create"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("MEMLANE_STORE", store)
    # With $MEMLANE_STORE, the arguments are the command's own...
    args = parse(["add", "one", "two"])
    assert (args.store, args.text) == (store, ["one", "two"])
    assert parse(["search", "tea"]).store == store
    # ...and a store given first is still read where the command's arguments are fixed.
    assert run_json(capsys, "stats", other, *TEXT)["records"] == 1
    doc = run_json(capsys, "search", other, "only", *TEXT, "--mode", "text")
    assert [h["record"]["text"] for h in doc["hits"]] == ["only here"]
    assert run_json(capsys, "stats", *TEXT)["records"] == 3


def test_only_create_makes_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Deploy\n\nRun the blue-green script.\n")
    dump = tmp_path / "dump.jsonl"
    dump.write_text("")
    missing = tmp_path / "missing"
    own = {
        "add": ["hello"],
        "import": [str(dump)],
        "ingest": [str(folder), "--shared", "--no-progress"],
        "mcp": [],
        "serve": ["--port", "0"],
    }
    assert {name for name, cmd in COMMANDS.items() if cmd.creates} == set(own)
    for name, rest in own.items():
        code, out, err = run(capsys, name, str(missing), *rest, *TEXT)
        assert code == 1 and out == "", name
        assert (
            err
            == f"memlane: error: no memlane store at {missing}; pass --create to make a new one\n"
        )
        assert not missing.exists(), name
    code, out, err = run(capsys, "ingest", str(missing), *own["ingest"], *TEXT, "--create")
    assert code == 0 and "1 ingested" in out
    assert err == f"memlane: creating a new store at {missing}\n"
    # The other commands take no --create.
    for name in set(STORE_COMMANDS) - set(own):
        assert "--create" not in run(capsys, name, "--help")[1], name
    code, _, err = run(capsys, "stats", str(missing), "--create")
    assert code == 2 and "unrecognized arguments: --create" in err


def test_a_truncated_text_is_a_one_line_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s")
    long = "word " * 700  # more than the default model's 256 tokens
    code, out, err = run(capsys, "add", store, long, "--create")
    assert code == 0 and len(out.split()) == 1
    assert err.splitlines() == [
        f"memlane: creating a new store at {store}",
        "note: 1 text(s) were longer than the embedding model reads (256 tokens): their "
        "vectors stand for their beginning (text search sees all of them)",
    ]
    # --debug: the warning as Python gives it, with where it came from.
    from memlane.embeddings import TextTruncatedWarning

    with pytest.warns(TextTruncatedWarning, match="exceeded the model's limit of 256 tokens"):
        assert main(["add", store, long + "again", "--debug"]) == 0


def test_a_warning_is_a_one_line_note(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    # A snapshot of another database: rebuilt with a warning.
    (Path(store) / "index" / "store_id").write_text("00000000-0000-0000-0000-000000000000")
    code, out, err = run(capsys, "stats", store, *TEXT)
    assert code == 0 and "records   3" in out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: the index snapshot of "), err
    assert lines[0].endswith("rebuilding it from the database") and ".py:" not in err
