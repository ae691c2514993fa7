"""The command line against hostile input: out-of-range ports, names that are not UTF-8
in ``--json`` documents, ages past every time, standard input that does not decode."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memlane import Memory
from memlane.cli import main, parse
from memlane.cli.watching import _printer
from memlane.knowledge.report import IngestReport

TEXT = ["--embedder", "none"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def utf8_json(out: str) -> Any:
    """The document as a reader of stdout's bytes gets it: UTF-8 (strict), then JSON."""
    return json.loads(out.encode("utf-8").decode("utf-8"))


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    path = str(tmp_path / "store")
    assert main(["add", path, "an old memory", "--create", *TEXT]) == 0
    capsys.readouterr()
    return path


def _non_utf8_names_allowed(tmp_path: Path) -> None:
    try:
        (tmp_path / "probe\udcff").write_bytes(b"")
    except (OSError, UnicodeError):
        pytest.skip("this file system refuses names that are not UTF-8")


# -- serve --port ---------------------------------------------------------------------------


@pytest.mark.parametrize("port", ["65536", "99999", "-1", str(2**64)])
def test_serve_port_out_of_range_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    code, out, err = run(capsys, "serve", str(tmp_path / "s"), "--port", port)
    assert code == 2 and out == ""
    assert "argument --port:" in err.splitlines()[-1]


@pytest.mark.parametrize("port", [0, 8765, 65535])
def test_serve_port_in_range_parses(tmp_path: Path, port: int) -> None:
    assert parse(["serve", str(tmp_path / "s"), "--port", str(port)]).port == port


# -- --json with names that are not UTF-8 ---------------------------------------------------


def test_json_export_import_name_files_that_are_not_utf8(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _non_utf8_names_allowed(tmp_path)
    file = str(tmp_path / "out\udcff.jsonl")  # the byte 0xff, as Python reads argv
    code, out, err = run(capsys, "export", store, file, "--json")
    assert code == 0, err
    doc = utf8_json(out)
    assert doc["exported"] == 1 and doc["file"] == file
    assert os.fsencode(doc["file"]).endswith(b"out\xff.jsonl")
    code, out, err = run(capsys, "import", store, file, "--skip-existing", "--json")
    assert code == 0, err
    assert utf8_json(out)["file"] == file


def test_json_errors_name_stores_that_are_not_utf8(tmp_path: Path) -> None:
    missing = os.fsencode(tmp_path / "no\udcffstore")
    res = subprocess.run(
        [sys.executable, "-m", "memlane", "stats", missing, "--json"], capture_output=True
    )
    assert res.returncode == 1
    message = json.loads(res.stdout.decode("utf-8"))["error"]["message"]
    assert os.fsencode(message).endswith(missing)
    assert len(res.stderr.splitlines()) == 1


def test_json_ingest_reports_failed_names_that_are_not_utf8(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _non_utf8_names_allowed(tmp_path)
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "n\udcffote.md").write_bytes(b"# T\n\nbody\n")
    (kb / "ok.md").write_bytes(b"# T\n\nfine\n")
    code, out, _ = run(capsys, "ingest", store, str(kb), "--shared", "--no-progress", "--json")
    doc = utf8_json(out)
    assert code == 1 and doc["ok"] is False
    assert list(doc["failed"]) == ["n\udcffote.md"] and list(doc["ingested"]) == ["ok.md"]


def test_json_watch_lines_are_utf8(capsys: pytest.CaptureFixture[str]) -> None:
    on_report, _ = _printer(True)
    on_report(IngestReport(seen=1, failed={"n\udcffote.md": "not valid UTF-8"}))
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert utf8_json(out)["failed"] == {"n\udcffote.md": "not valid UTF-8"}


def test_json_stats_of_a_store_named_in_bytes_through_a_process(store: str, tmp_path: Path) -> None:
    _non_utf8_names_allowed(tmp_path)
    named = tmp_path / "st\udcff"
    os.rename(store, named)
    res = subprocess.run(
        [sys.executable, "-m", "memlane", "stats", os.fsencode(named), "--json"],
        capture_output=True,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout.decode("utf-8"))
    assert os.fsencode(doc["store"]) == os.fsencode(named) and doc["records"] == 1


def test_json_keeps_other_text_as_it_is(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "add", store, "café ☕ 𝄞", "--json")
    assert code == 0
    assert "café ☕ 𝄞" in out  # not escaped to ASCII
    assert utf8_json(out)["records"][0]["text"] == "café ☕ 𝄞"


# -- prune with an age past every time ------------------------------------------------------


@pytest.mark.parametrize("age", [1e300, 1e304, 1e308, 1.7976931348623157e308])
def test_prune_older_than_forever_prunes_nothing(age: float) -> None:
    with Memory(None, embedder=None) as mem:
        mem.add("an old memory")
        assert mem.prune(max_age_days=age, dry_run=True) == []
        assert mem.prune(max_age_days=age) == [] and mem.count() == 1
        # An age that still reaches back prunes as before.
        later = mem.list()[0].created_at + 2 * 86400
        assert len(mem.prune(max_age_days=1, now=later, dry_run=True)) == 1


def test_prune_cli_huge_age(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "prune", store, "--max-age-days", "1e308", "--json")
    assert code == 0, err
    assert utf8_json(out)["count"] == 0


@pytest.mark.parametrize("age", ["inf", "nan", "-1", "soon"])
def test_prune_cli_refuses_an_age_that_is_no_number_of_days(
    store: str, capsys: pytest.CaptureFixture[str], age: str
) -> None:
    code, _, err = run(capsys, "prune", store, f"--max-age-days={age}", "--dry-run")
    assert code == 2
    assert "argument --max-age-days:" in err.splitlines()[-1]


# -- add - with standard input that does not decode ----------------------------------------


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stdin", stream)


def test_add_stdin_not_utf8_is_a_one_line_error(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, b"fine\n\na\xffb\n")
    code, out, err = run(capsys, "add", store, "-")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "memlane: error: line 3 of standard input is not valid utf-8: b'\\xff' at byte 2 "
        "(invalid start byte)"
    ]
    _stdin(monkeypatch, b"a\xffb\n")
    code, out, _ = run(capsys, "add", store, "-", "--json")
    assert code == 1 and utf8_json(out)["error"]["type"] == "InvalidArgumentError"
    code, out, _ = run(capsys, "stats", store, "--json")
    assert utf8_json(out)["records"] == 1  # nothing was added


def test_add_stdin_lines_as_a_text_stream_reads_them(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, "one\r\n\n  \ntwo ☕\rthree\n".encode())
    code, out, err = run(capsys, "add", store, "-", "--json")
    assert code == 0, err
    assert [r["text"] for r in utf8_json(out)["records"]] == ["one", "two ☕", "three"]


# -- what another attack found --------------------------------------------------------------


def test_json_writes_no_number_json_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    # A model's answer echoed in a report (a rejected operation's NaN or 1e400): strict
    # readers (jq, JSON.parse) refuse a bare NaN, so it is written as a string.
    from memlane.cli._command import emit_json

    emit_json({"rejected": [{"weight": float("nan"), "big": [float("inf"), -float("inf")]}]})
    out = capsys.readouterr().out
    assert json.loads(out, parse_constant=pytest.fail) == {
        "rejected": [{"weight": "NaN", "big": ["Infinity", "-Infinity"]}]
    }


def test_a_closed_stdin_is_said_in_the_commands_words(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # started with it closed: `<&-`
    for argv in (["add", store, "-"], ["reflect", store, "-", "--model", "m"]):
        code, _, err = run(capsys, *argv)
        assert code != 0 and "standard input is closed" in err, err
    code, out, _ = run(capsys, "stats", store, "--json")
    assert utf8_json(out)["records"] == 1


def test_an_error_under_json_to_a_reader_gone_is_no_traceback(tmp_path: Path) -> None:
    # `memlane list missing --json | head -0`: the error's document meets a closed pipe.
    done = subprocess.run(
        f"{sys.executable} -m memlane list {tmp_path / 'missing'} --json | head -c 0",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr and "memlane: error: no memlane store" in done.stderr


def test_demo_keeps_its_store_only_in_a_new_or_empty_folder(
    store: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Not in a user's store: its records were added to, and printed raw to the terminal.
    code, _, err = run(capsys, "demo", "--keep", store)
    assert code == 1 and "give a new or empty folder" in err
    code, out, _ = run(capsys, "stats", store, "--json")
    assert utf8_json(out)["records"] == 1


def test_sigterm_stops_a_command_as_ctrl_c_does(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the default action ended the process at once: an export left its
    # temporary file beside FILE for good, and nothing said why the command stopped.
    def terminated(self: Memory, *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises here, in this thread, at once
        raise AssertionError("SIGTERM did not stop the command")

    monkeypatch.setattr(Memory, "list", terminated)
    code, _, err = run(capsys, "stats", store)
    assert code == 130 and err.splitlines() == ["memlane: interrupted"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # given back


def test_a_refused_add_makes_no_new_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "add", str(tmp_path / "new"), "   ", "--create", *TEXT)
    assert code == 1 and "text is empty or whitespace-only" in err
    assert not (tmp_path / "new").exists()


def test_a_command_started_without_stdout_or_stdin_says_so_or_goes_on(store: str) -> None:
    def shell(command: str) -> subprocess.CompletedProcess[str]:
        line = f"{sys.executable} -m memlane {command}"
        return subprocess.run(line, shell=True, capture_output=True, text=True, timeout=120)

    listed = shell(f"list {store} --json >&-")  # what it prints goes nowhere
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    for closed in ("<&-", ">&-"):
        served = shell(f"mcp {store} {closed}")
        assert served.returncode == 1 and "Traceback" not in served.stderr
        assert "speaks over stdin and stdout" in served.stderr, served.stderr
