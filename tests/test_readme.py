"""Every code block of README.md runs in a test: here, or in the test named for its section.

Each ```python block runs in a fresh temporary directory, statement by statement. A
block that continues an earlier one (uses ``mem``, ``vectors``, ``ids`` ...) gets those
names from its section's prelude below, made of what the README's text says they are;
the block itself runs unchanged, except where a section's runner names the one
substitution it makes (a server's address). An expression statement whose line ends in
a comment that is a Python literal (``memlane.analyze(...)  # ['run', 'quick']``) must
evaluate to it.

A block no test can run is marked in README.md by the line
``<!-- readme-test: skip: REASON -->`` right before it; none is today. The bash block's
``memlane`` commands run through ``python -m memlane`` (those of the command line
section in tests/test_cli_upkeep.py and tests/test_knowledge_watch.py, against the
scripted chat server and until interrupted); ``pip install`` and the test command are
what CI itself runs.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memlane
from memlane import Memory

README = Path(__file__).resolve().parents[1] / "README.md"
SKIP = re.compile(r"<!--\s*readme-test:\s*skip:\s*(\S.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # of the opening fence, from 1
    section: str  # the "## " heading above it
    skip: str | None  # the reason, if marked

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.section})"


def readme_blocks() -> list[Block]:
    lines = README.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    section = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        elif (m := re.match(r"^```(\w*)\s*$", line)) is not None:
            end = i + 1
            while not lines[end].startswith("```"):
                end += 1
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            skip = SKIP.search(before)
            code = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(m.group(1), code, i + 1, section, skip and skip.group(1)))
            i = end
        i += 1
    return blocks


#: Sections whose Python blocks other tests run as written: their files, and which
#: blocks they pick (test_agent_readme.py takes every block of its section and counts
#: them; the drop-in and adapter tests take those that import a memlane.compat or a
#: memlane.integrations module).
ELSEWHERE: dict[str, tuple[tuple[str, ...], Callable[[str], bool]]] = {
    "Agents: tools, context, scoping, consolidation, MCP": (
        ("test_agent_readme.py",),
        lambda code: True,
    ),
    "Use it from ...": (
        ("test_compat_readme.py", "integrations/test_readme_integrations.py"),
        lambda code: "memlane.compat." in code or "memlane.integrations." in code,
    ),
}


def run_statements(code: str, scope: dict[str, Any], name: str) -> dict[str, Any]:
    """Runs ``code`` a statement at a time, checking ``# literal`` comments of expressions."""
    source = code.split("\n")
    for node in ast.parse(code).body:
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), name, "eval"), scope)
            _, _, comment = source[(node.end_lineno or node.lineno) - 1].partition("  # ")
            try:
                expected = ast.literal_eval(comment.strip())
            except (ValueError, SyntaxError):
                continue
            assert value == expected, f"{name}: {ast.unparse(node)} gave {value!r}"
        else:
            exec(compile(ast.Module([node], type_ignores=[]), name, "exec"), scope)
    return scope


# -- the sections' runners ------------------------------------------------------------------

Runner = Callable[[Block, pytest.FixtureRequest, Path], None]
RUNNERS: dict[str, Runner] = {}


def runs(section: str) -> Callable[[Runner], Runner]:
    def register(f: Runner) -> Runner:
        RUNNERS[section] = f
        return f

    return register


@runs("Quick start")
def quick_start(block: Block, request: pytest.FixtureRequest, tmp: Path) -> None:
    # Twice: a second run finds the store and the documents it made.
    for run in (1, 2):
        scope = run_statements(block.code, {}, str(block))
        assert scope["hits"][0].record.text == "User prefers dark mode"
        assert scope["hits"][0].explain is not None
        report = scope["report"]
        assert report.ok and report.seen == 1
        assert len(report.ingested if run == 1 else report.unchanged) == 1
        assert "blue-green" in scope["fragments"][0].record.text
        assert scope["history"] == []
    assert (tmp / "agent-store" / "memory.db").is_file()
    with Memory(tmp / "agent-store") as mem:
        assert mem.count(table="memories") == 6  # the adds are not unique: each run stores them


@runs("Filters")
def filters(block: Block, request: pytest.FixtureRequest, tmp: Path) -> None:
    # Each expression is a filter: the engine must accept it, on list and on search.
    mem = Memory(None, request.getfixturevalue("word_embedder"))
    kept = mem.add("pro user on telegram", metadata={"source": "telegram", "user": {"plan": "pro"}})
    mem.add("free user on discord", metadata={"source": "discord", "lang": "en"})
    scope: dict[str, Any] = {"seen_ids": ["no-such-id"]}
    found = []
    for node in ast.parse(block.code).body:
        assert isinstance(node, ast.Expr), ast.unparse(node)
        value = eval(compile(ast.Expression(node.value), str(block), "eval"), scope)
        for f in value if isinstance(value, tuple) else (value,):
            assert isinstance(f, dict)
            found.append(f)
            mem.list(filters=f)
            mem.search("user", filters=f)
    assert len(found) == 8
    assert [r.id for r in mem.list(filters={"user.plan": "pro"})] == [kept.id]
    mem.close()


@runs("Facts that change")
def facts(block: Block, request: pytest.FixtureRequest, tmp: Path) -> None:
    # The README's store uses the default model; the literal comments check the answers.
    scope = run_statements(block.code, {}, str(block))
    with Memory(tmp / "facts-store") as mem:
        assert len(mem) == 2 and mem.count(filters={"valid_to": None}) == 1
        assert [v.record.id for v in mem.history(scope["old"].id)] == [
            scope["old"].id,
            scope["new"].id,
        ]


@runs("PostgreSQL: one store, many processes")
def postgres(block: Block, request: pytest.FixtureRequest, tmp: Path) -> None:
    server = request.getfixturevalue("pg_server")
    url = "postgresql://app:secret@db.internal:5432/agents?schema=memlane"
    # The README's server and cache folder, replaced by the test cluster and a temporary one.
    assert url in block.code and '"/var/cache/memlane"' in block.code
    code = block.code.replace(url, server.url(schema="readme")).replace(
        '"/var/cache/memlane"', repr(str(tmp / "cache"))
    )
    scope = run_statements(code, {"memlane": memlane}, str(block))
    mem = scope["mem"]
    try:
        rec = mem.add("Shared by every process", agent_id="a")
        assert mem.search("every process", k=1)[0].record.id == rec.id
    finally:
        mem.close()


@runs("HnswIndex")
def hnsw(block: Block, request: pytest.FixtureRequest, tmp: Path) -> None:
    vectors = np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32)
    scope = run_statements(block.code, {"vectors": vectors, "query": vectors[:2]}, str(block))
    labels = scope["labels"]  # the allowed search's
    assert labels.shape == (2, 10) and set(labels[:, :2].ravel()) <= {1, 2}
    assert labels[1, 0] == 1 and labels[0, 2] == 2**64 - 1
    assert (tmp / "index.bin").is_file()
    loaded, _ = scope["idx"].search(vectors, k=3)
    assert 2 not in loaded and loaded[0, 0] == 0 and loaded[1, 0] == 1


@runs("BM25Index")
def bm25(block: Block, request: pytest.FixtureRequest, tmp: Path) -> None:
    given = {"memlane": memlane, "ids": [1, 2], "texts": ["query text one", "another text"]}
    scope = run_statements(block.code, given, str(block))
    assert len(scope["ids"]) == 2 and scope["scores"].shape == (2, 10)  # search_batch's
    assert np.all(scope["ids"] == 2**64 - 1)  # everything was removed
    assert len(scope["bm"]) == 0


@runs("Knowledge: documents as searchable fragments")
def knowledge(block: Block, request: pytest.FixtureRequest, tmp: Path) -> None:
    from test_loaders import make_pdf

    (tmp / "knowledge" / "shared").mkdir(parents=True)
    (tmp / "knowledge" / "eliza").mkdir()
    (tmp / "knowledge/shared/deploy.md").write_text(
        "# Deploy\n\nDeploy with the blue-green script and watch the dashboard.\n"
    )
    (tmp / "knowledge/eliza/notes.txt").write_text("Eliza answers support questions politely.\n")
    (tmp / "knowledge/eliza/specific.pdf").write_bytes(make_pdf(["Eliza's refund policy."]))
    mem = Memory(None, request.getfixturevalue("onnx_embedder"))
    try:
        if "ingest" not in block.code:  # the later blocks: the folders are ingested already
            mem.ingest("knowledge/shared", shared=True, progress=False)
            mem.ingest("knowledge/eliza", agent_id="eliza", progress=False)
        scope = run_statements(block.code, {"mem": mem}, str(block))
        if "search_documents" in block.code:
            assert scope["docs"][0].record.metadata["source"] == "deploy.md"
            assert scope["docs"][0].record.text.startswith("# Deploy\n\nDeploy with")
            return
        if "watch" in block.code:
            assert not scope["watch"].running
            (hit,) = mem.search_knowledge("refunds", mode="text")
            assert hit.record.metadata["source"] == "faq.md"
            return
        report = scope["report"]
        assert report.ok and len(report.unchanged) == 2  # ingest_config: both already in
        assert "deploy.md" in scope["hits"][0].record.metadata["source"]
        # The first document (the shared one, oldest first) removed, then eliza's cleared.
        assert scope["document_id"] not in {d.id for d in mem.list_documents()}
        assert mem.count(table="documents") == mem.count(table="fragments") == 0
    finally:
        mem.close()


# -- the tests ------------------------------------------------------------------------------


def test_every_block_is_run_somewhere() -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 10
    for block in blocks:
        if block.lang != "python":
            continue
        picked = block.section in ELSEWHERE and ELSEWHERE[block.section][1](block.code)
        assert block.skip or block.section in RUNNERS or picked, (
            f"{block} is run by no test: add a runner to tests/test_readme.py"
        )
    sections = {b.section for b in blocks}
    tests = Path(__file__).parent
    for section, (files, _) in ELSEWHERE.items():
        assert section in sections, f"no section {section!r} in README.md any more"
        heading = section.split(":")[0].rstrip(". ")
        for name in files:
            assert heading in (tests / name).read_text(encoding="utf-8"), (name, heading)
    for section in RUNNERS:
        assert section in sections, f"no section {section!r} in README.md any more"


def python_blocks() -> list[Block]:
    return [b for b in readme_blocks() if b.lang == "python" and b.section not in ELSEWHERE]


@pytest.mark.parametrize("block", python_blocks(), ids=str)
def test_python_block_runs(
    block: Block, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.skip:
        pytest.skip(f"marked in README.md: {block.skip}")
    monkeypatch.chdir(tmp_path)
    RUNNERS[block.section](block, request, tmp_path)


#: The section whose bash block holds commands that need a model server, or run until
#: interrupted: tests/test_cli_upkeep.py and tests/test_knowledge_watch.py run them.
COMMAND_LINE = "Command line"


def readme_commands(section: str) -> list[str]:
    """The ``memlane`` commands of ``section``'s bash blocks, as written."""
    return [
        command.strip()
        for block in readme_blocks()
        if block.lang == "bash" and not block.skip and block.section == section
        for line in block.code.splitlines()
        for command in line.split("&&")
        if command.strip().startswith("memlane ")
    ]


def test_bash_block_commands_run(tmp_path: Path) -> None:
    sections = {b.section for b in readme_blocks() if b.lang == "bash"} - {COMMAND_LINE}
    commands = [command for section in sorted(sections) for command in readme_commands(section)]
    assert commands == ["memlane demo"]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    for command in commands:
        args = [sys.executable, "-m", "memlane", *command.split()[1:]]
        out = subprocess.run(
            args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr
        assert "hybrid search" in out.stdout
