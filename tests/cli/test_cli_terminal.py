"""The command line's text output against what others wrote: memory texts, ids, tables,
scopes, file names and a model's answers holding escape sequences, carriage returns and
bidirectional overrides are shown escaped (``printable``), never acted on by the
terminal; ``--json`` documents hold them as they are, as escapes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chat_server import ScriptedChatServer
from memlane import Memory
from memlane.agent.consolidation import add_short_term
from memlane.cli import main
from memlane.cli.watching import _printer, changes
from memlane.knowledge.report import IngestReport
from memlane.printable import printable

TEXT = ["--embedder", "none"]
# What a terminal acts on or does not show: controls, DEL, C1, separators, bidi, surrogates.
HIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
EVIL = "hello \x1b]0;TITLE\x07\x1b[2J\x1b[31mred\x1b[0m\rfake\u202eevil\x9b end"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def clean(text: str) -> bool:
    """No character a terminal acts on, but the newlines that end the lines."""
    return HIDDEN.search(text) is None


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str]:
    path = tmp_path / "store"
    with Memory(path, None) as mem:
        record = mem.add(
            EVIL + "\nsecond line",
            id="id\x1b[8m",
            user_id="u\x1b[8mhidden",
            table="t\x1b[1mX",
            metadata={"k": "\x1b[5mv"},
        )
    return str(path), record.id


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[31mb", "a\\x1b[31mb"),
        ("one\ntwo\r\tthree", "one\\ntwo\\r\\tthree"),
        ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"),
        ("abc\u202edcba\u2066x\u2069\u200f\u061c", "abc\\u202edcba\\u2066x\\u2069\\u200f\\u061c"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("name\udcff", "name\\udcff"),
        ("café 漢字 👩\u200d💻 C:\\path", "café 漢字 👩\u200d💻 C:\\path"),
    ],
)
def test_printable_escapes_what_a_terminal_acts_on(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_list_search_get_stats_show_stored_text_escaped(
    capsys: pytest.CaptureFixture[str], store: tuple[str, str]
) -> None:
    path, record_id = store
    for argv in (
        ["list", path],
        ["search", path, "hello", "--mode", "text", "--explain"],
        ["get", path, record_id],
        ["stats", path],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert clean(out) and clean(err), (argv, out)
        if argv[0] != "stats":
            assert "\\x1b]0;TITLE\\x07" in out and "\\u202eevil\\x9b" in out
            assert "id\\x1b[8m" in out
        assert "t\\x1b[1mX" in out and "u\\x1b[8mhidden" in out
    code, out, _ = run(capsys, "get", path, record_id)
    # One line a field: the text's newline and carriage return cannot fake another.
    lines = out.splitlines()
    assert [line.split()[0] for line in lines if line][:3] == ["id", "text", "table"]
    text_line = next(line for line in lines if line.startswith("text "))
    assert text_line.endswith("\\rfake\\u202eevil\\x9b end\\nsecond line")


def test_json_output_keeps_the_stored_text(
    capsys: pytest.CaptureFixture[str], store: tuple[str, str]
) -> None:
    path, record_id = store
    code, out, _ = run(capsys, "get", path, record_id, "--json")
    # JSON escapes C0 itself; C1 controls and bidi marks are escaped too, which JSON
    # allows raw (a terminal showing the document acts on them).
    assert code == 0 and clean(out.replace("\n", ""))
    (record,) = json.loads(out)["records"]
    assert record["text"] == EVIL + "\nsecond line" and record["id"] == record_id


def test_an_export_to_the_terminal_escapes_what_it_would_act_on(
    capsys: pytest.CaptureFixture[str], store: tuple[str, str], tmp_path: Path
) -> None:
    path, record_id = store
    code, _, _ = run(capsys, "export", path, str(tmp_path / "out.jsonl"))
    assert code == 0
    text = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
    assert clean(text.replace("\n", ""))  # a file shown with cat, or /dev/stdout
    with Memory(tmp_path / "again", None) as mem:
        assert mem.import_jsonl(tmp_path / "out.jsonl") == 1
        assert mem.get(record_id).text == EVIL + "\nsecond line"


def test_add_prune_and_forget_show_ids_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = str(tmp_path / "store")
    with Memory(path, None) as mem:
        mem.add("old \x1b[2J note", id="old\x1b]0;x\x07", created_at=1.0e9)
    code, out, _ = run(capsys, "prune", path, "--max-age-days", "1", "--dry-run")
    assert code == 0 and clean(out)
    assert "old\\x1b]0;x\\x07  old \\x1b[2J note" in out
    code, out, _ = run(capsys, "add", path, "new", "--unique", *TEXT)
    assert code == 0 and clean(out)


def test_consolidate_and_reflect_show_the_models_text_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "store"
    with Memory(path, None) as mem:
        for i in range(2):
            add_short_term(mem, f"step {i}", "trip", scope={"user_id": "alice"})
        mem.add("Alice lives in Porto", user_id="alice")
    summary = {"summary": "trip \x1b[2J summary", "facts": ["fact \u202eone"]}
    llm = ["--model", "m", *TEXT, "--user", "alice", "--force"]
    with ScriptedChatServer([json.dumps(summary)]) as server:
        code, out, err = run(capsys, "consolidate", str(path), *llm, "--base-url", server.base_url)
    assert code == 0, err
    assert clean(out) and "trip \\x1b[2J summary" in out and "fact \\u202eone" in out

    chat = tmp_path / "chat.txt"
    chat.write_text("user: I moved\n", encoding="utf-8")
    ops = {
        "operations": [
            {"op": "remember", "content": "moved \x1b[31m away", "type": "semantic"},
            {"op": "forget", "memory": 9},
        ]
    }
    with ScriptedChatServer([json.dumps(ops)]) as server:
        code, out, err = run(
            capsys, "reflect", str(path), str(chat), *llm[:-1], "--base-url", server.base_url
        )
    assert code == 0, err
    assert clean(out) and "moved \\x1b[31m away" in out

    with Memory(path, None) as mem:
        add_short_term(mem, "step 3", "trip", scope={"user_id": "alice"})
    with ScriptedChatServer(["not JSON \x1b[2J"]) as server:
        code, out, err = run(capsys, "consolidate", str(path), *llm, "--base-url", server.base_url)
    assert code == 1 and clean(err)


def test_ingest_report_and_watch_lines_show_file_names_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "ok \x1b]0;PWNED\x07.md").write_text("# t\n\nhello there", encoding="utf-8")
    (folder / "bad \x1b[31mred.pdf").write_bytes(b"%PDF-garbage")
    code, out, err = run(
        capsys, "ingest", str(tmp_path / "s"), str(folder), "--shared", "--create",
        "--no-progress", *TEXT,
    )  # fmt: skip
    assert code == 1
    assert clean(out) and clean(err) and "bad \\x1b[31mred.pdf: " in out

    report = IngestReport(
        ingested={"new\x1b[2J.md": "d1"},
        failed={"bad\r.pdf": "corrupt \x1b]0;x\x07"},
        skipped={"\u202eexe.md": "hidden"},
        pruned={"gone\x1b.md": "d2"},
    )
    assert clean(str(report)) and "bad\\r.pdf: corrupt \\x1b]0;x\\x07" in str(report)
    lines = changes(report)
    assert all(clean(line) for line in lines)
    assert "ingested new\\x1b[2J.md" in lines and "removed gone\\x1b.md" in lines
    on_report, on_error = _printer(False)
    on_report(report)
    on_error(RuntimeError("watch failed on \x1b[2J.md"))
    out, err = capsys.readouterr()
    assert clean(out) and clean(err) and "\\x1b[2J.md" in err


def test_an_error_naming_a_path_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # knowledge's ingest names the path given as it is; the error line shows it escaped,
    # the --json error document as it is.
    missing = str(tmp_path / f"no{EVIL}")
    args = ("ingest", str(tmp_path / "s"), missing, "--shared", "--create", *TEXT)
    code, _, err = run(capsys, *args)
    assert code == 1 and "no such file or folder" in err and clean(err)
    code, out, _ = run(capsys, *args, "--json")
    assert code == 1 and json.loads(out)["error"]["message"].endswith(missing)
