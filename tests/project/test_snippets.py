"""Every Python and shell block of README.md and docs/ runs as written, alone.

A block runs in a fresh process with a temporary directory as its working directory
(so a fresh store): Python blocks with this interpreter, shell blocks with bash, the
installed ``memlane`` command first on ``PATH``. The test ids are the file and the
line of the opening fence (``docs/knowledge.md:42``).

HTML comments on the lines right before a fence say more about the block:

- ``<!-- snippet: NAME -->`` names it; ``<!-- continues: NAME -->`` makes it run after
  the block named NAME (and what that one continues), in the same process for Python
  blocks, in the same directory for shell blocks;
- ``<!-- snippet-test: install -->``: the block installs or builds (pip, maturin,
  cargo). It is not run here: ``.ci/run`` runs these commands itself, so the test
  checks that each of its lines is, verbatim, a line of ``.ci/run`` or of
  ``docs/install.md``. Every shell block of ``docs/install.md`` counts as one, and an
  unmarked block that runs ``pip install`` or ``maturin`` is an error;
- ``<!-- snippet-test: postgres -->``: the block needs a PostgreSQL server and reads
  its URL from ``$DATABASE_URL``, which the test sets to a schema of the throwaway
  cluster of ``tests/pg_server.py`` (skipped without PostgreSQL binaries, as the other
  PostgreSQL tests are, and a failure where ``MEMLANE_REQUIRE_PG`` is set);
- ``<!-- snippet-test: model-server -->``: a shell block whose commands call a model
  server at ``$LLM_URL``, which the test sets to a loopback stand-in answering as a
  model would (Python blocks define their stand-in model themselves).

In a Python block, an expression statement whose line ends in a comment that is a
Python literal (``memlane.analyze("Running")  # ['run']``) must evaluate to it.
A ``json`` block must parse. Other blocks (``text``) are not code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chat_server import ScriptedChatServer
from conftest import REPO

ROOT = REPO
INSTALL_GUIDE = ROOT / "docs" / "install.md"
CI_SCRIPT = ROOT / ".ci" / "run"
MARK = re.compile(r"<!--\s*(snippet|continues|snippet-test)\s*:\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)```\s*(\w*)\s*$")
SHELLS = {"bash", "sh", "shell"}
KINDS = {"install", "postgres", "model-server"}
INSTALLING = re.compile(r"(^|&&|;)\s*(python -m )?(pip install|maturin)\b", re.M)
TIMEOUT = 120  # seconds for one chain: a block takes a few


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository
    line: int  # of the opening fence, from 1
    lang: str
    code: str
    name: str | None
    continues: str | None
    kind: str | None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.lang in SHELLS


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    file = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    marks: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence is None:
            found = MARK.findall(line)
            if found:
                marks.update(found)
            elif line.strip():
                marks = {}
            i += 1
            continue
        indent, lang = fence.group(1), fence.group(2)
        end = i + 1
        while not lines[end].strip().startswith("```"):
            end += 1
        code = textwrap.dedent("\n".join(line[len(indent) :] for line in lines[i + 1 : end]))
        kind = marks.get("snippet-test")
        if path == INSTALL_GUIDE and lang in SHELLS:
            kind = "install"
        assert kind is None or kind in KINDS, f"{file}:{i + 1}: unknown snippet-test {kind!r}"
        blocks.append(
            Block(
                file, i + 1, lang, code + "\n", marks.get("snippet"), marks.get("continues"), kind
            )
        )
        marks = {}
        i = end + 1
    return blocks


BLOCKS = [b for path in doc_files() for b in parse(path)]
NAMED = {b.name: b for b in BLOCKS if b.name}
RUN = [b for b in BLOCKS if (b.lang == "python" or b.shell) and b.kind != "install"]
INSTALL = [b for b in BLOCKS if b.kind == "install"]


def chain(block: Block) -> list[Block]:
    """The blocks ``block`` continues, first to last, then ``block``."""
    out = [block]
    while out[0].continues is not None:
        assert out[0].continues in NAMED, f"{out[0].id}: no block named {out[0].continues!r}"
        out.insert(0, NAMED[out[0].continues])
        assert len(out) < 20, f"{block.id}: a cycle of continues"
    return out


# -- running a chain ------------------------------------------------------------------------

#: Runs a list of Python blocks in one process; prints a line after each that ran.
RUNNER = r"""
import ast, json, sys

def run(block_id, line, code, scope):
    source = code.split("\n")
    module = ast.parse("\n" * (line) + code, block_id)  # line numbers as in the file
    for node in module.body:
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), block_id, "eval"), scope)
            _, _, comment = source[(node.end_lineno or node.lineno) - line - 1].partition("  # ")
            try:
                expected = ast.literal_eval(comment.strip())
            except (ValueError, SyntaxError):
                continue
            if value != expected:
                sys.exit(f"{block_id}, line {node.lineno}: {ast.unparse(node)} gave {value!r}, "
                         f"the comment says {expected!r}")
        else:
            exec(compile(ast.Module([node], type_ignores=[]), block_id, "exec"), scope)

scope = {"__name__": "__main__"}
for block_id, line, code in json.load(open(sys.argv[1], encoding="utf-8")):
    run(block_id, line, code, scope)
    print(f"@@ran {block_id}", flush=True)
"""


@dataclass
class Outcome:
    ran: set[str]
    output: str
    cwd: Path


def environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "LLM_URL"}}
    bin_dir = str(Path(sys.executable).parent)  # the installed memlane command
    env.update(PATH=bin_dir + os.pathsep + env.get("PATH", ""), PYTHONIOENCODING="utf-8")
    env.update(extra)
    return env


def run_chain(blocks: list[Block], cwd: Path, env: dict[str, str]) -> Outcome:
    """Runs consecutive Python blocks in one process, each shell block in bash; stops at
    the first failure."""
    ran: set[str] = set()
    output: list[str] = []
    groups: list[list[Block]] = []
    for block in blocks:
        if groups and not block.shell and not groups[-1][0].shell:
            groups[-1].append(block)
        else:
            groups.append([block])
    for group in groups:
        if group[0].shell:
            args = ["bash", "-euo", "pipefail", "-c", group[0].code]
        else:
            script = cwd.parent / f"{cwd.name}-blocks.json"
            script.write_text(json.dumps([[b.id, b.line, b.code] for b in group]))
            args = [sys.executable, "-c", RUNNER, str(script)]
        try:
            done = subprocess.run(
                args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT
            )
        except subprocess.TimeoutExpired as e:
            output.append(f"{group[-1].id}: timed out after {TIMEOUT} s\n{e.stdout}{e.stderr}")
            break
        output.append(done.stdout + done.stderr)
        if group[0].shell:
            if done.returncode == 0:
                ran.add(group[0].id)
        else:
            ran.update(line[6:] for line in done.stdout.splitlines() if line.startswith("@@ran "))
        if done.returncode != 0:
            break
    return Outcome(ran, "".join(output), cwd)


# -- what some blocks need ------------------------------------------------------------------


def stand_in_model(body: dict[str, Any]) -> str:
    """Answers memlane's consolidation and reflection prompts as a model would."""
    prompt = json.dumps(body["messages"])
    if "operations" in prompt:
        remember = {"op": "remember", "content": "Alice moved to Lisbon", "type": "semantic"}
        return json.dumps({"operations": [remember]})
    summary = {
        "summary": "Alice planned a trip to Lisbon and asked about trains.",
        "facts": ["Alice is travelling to Lisbon in May", "Alice prefers trains to planes"],
        "pending": ["book the train"],
        "tone": "friendly",
        "preferences": ["trains"],
        "confidence": 0.9,
    }
    return json.dumps(summary)


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedChatServer]:
    server = ScriptedChatServer()
    server.script = _Endless(stand_in_model)  # type: ignore[assignment]
    with server:
        yield server


class _Endless:
    """A script that never runs out: the same callable for every request."""

    def __init__(self, answer: Callable[[dict[str, Any]], str]) -> None:
        self.answer = answer

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Callable[[dict[str, Any]], str]:
        return self.answer


_outcomes: dict[tuple[str, ...], Outcome] = {}


def outcome_for(
    block: Block, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Outcome:
    """The outcome of the first chain in the files that holds ``block`` and ends where
    nothing continues it, run once for every block it holds."""
    leaves = [b for b in RUN if b.name is None or all(o.continues != b.name for o in RUN)]
    blocks = next(c for c in map(chain, leaves) if block in c)
    key = tuple(b.id for b in blocks)
    if key not in _outcomes:
        extra: dict[str, str] = {}
        kinds = {b.kind for b in blocks}
        if "postgres" in kinds:
            server = request.getfixturevalue("pg_server")
            schema = "snippet_" + re.sub(r"\W", "_", blocks[-1].id).lower()
            extra["DATABASE_URL"] = server.url(schema=schema)
        if "model-server" in kinds:
            extra["LLM_URL"] = request.getfixturevalue("model_server").base_url
        cwd = tmp_path_factory.mktemp("snippet")
        _outcomes[key] = run_chain(blocks, cwd, environment(extra))
    return _outcomes[key]


#: Checks made after a named block ran, on what it left in its directory.
CHECKS: dict[str, Callable[[Outcome], None]] = {}


def check(name: str) -> Callable[[Callable[[Outcome], None]], Callable[[Outcome], None]]:
    def register(f: Callable[[Outcome], None]) -> Callable[[Outcome], None]:
        CHECKS[name] = f
        return f

    return register


@check("quickstart")
def quickstart_twice(outcome: Outcome) -> None:
    """Run again in the same folder, the quick start stores nothing new."""
    from memlane import Memory

    def counts() -> dict[str, int]:
        with Memory(outcome.cwd / "agent-store") as mem:
            return {t: mem.count(table=t) for t in ("memories", "documents", "fragments")}

    before = counts()
    assert before == {"memories": 3, "documents": 1, "fragments": 1}
    again = run_chain([NAMED["quickstart"]], outcome.cwd, environment({}))
    assert NAMED["quickstart"].id in again.ran, again.output
    assert "True To deploy, run the blue-green script" in again.output
    assert counts() == before


@check("cli-upkeep")
def cli_upkeep(outcome: Outcome) -> None:
    """The LLM commands asked the stand-in model and did what its answers say."""
    from memlane import Memory

    assert "consolidated 2 entries into " in outcome.output, outcome.output
    assert "remembered " in outcome.output, outcome.output
    with Memory(outcome.cwd / "kb-store") as mem:
        texts = {r.text for r in mem.list(user_id="alice", limit=100)}
        assert mem.count(table="short_term") == 0
    assert {"Alice is vegetarian", "Alice moved to Lisbon"} <= texts


# -- the tests ------------------------------------------------------------------------------


def test_blocks_found() -> None:
    files = {b.file for b in BLOCKS}
    assert "README.md" in files and len(files) >= 10
    assert NAMED.keys() >= set(CHECKS), set(CHECKS) - NAMED.keys()
    for block in BLOCKS:
        if block.continues is not None:
            chain(block)
        if block.shell and block.kind != "install":
            assert not INSTALLING.search(block.code), (
                f"{block.id} installs or builds: mark it <!-- snippet-test: install --> "
                "(and make it one of .ci/run's or docs/install.md's commands)"
            )


@pytest.mark.parametrize("block", RUN, ids=lambda b: b.id)
def test_block_runs(
    block: Block, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outcome = outcome_for(block, request, tmp_path_factory)
    assert block.id in outcome.ran, f"{block.id} failed:\n{outcome.output}"
    if block.name in CHECKS:
        CHECKS[block.name](outcome)


def ci_commands() -> set[str]:
    """The lines of .ci/run, .ci/test and the install guide's blocks, tools called by name
    (``"$tools/bin/maturin" build`` is ``maturin build``)."""
    lines = [
        line
        for path in (CI_SCRIPT, CI_SCRIPT.with_name("test"))
        if path.exists()
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    lines += [line for b in INSTALL if b.file == "docs/install.md" for line in b.code.splitlines()]
    return {re.sub(r'^"\$\w+/bin/(\w+)"', r"\1", line.strip()) for line in lines}


@pytest.mark.parametrize("block", INSTALL, ids=lambda b: b.id)
def test_install_block_is_what_ci_runs(block: Block) -> None:
    """Install and build commands are not run here: .ci/run runs them (through .ci/test).
    A block elsewhere must repeat them verbatim, a line at a time; the install guide's
    own blocks are the reference, and the scripts they name must exist."""
    lines = [s.strip() for s in block.code.splitlines() if s.strip() and not s.startswith("#")]
    assert lines, block.id
    for line in lines:
        if block.file == "docs/install.md":
            script = line.split()[0]
            assert not script.startswith(".ci/") or os.access(ROOT / script, os.X_OK), line
        else:
            assert line in ci_commands(), f"{block.id}: {line!r} is not among CI's commands"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=lambda b: b.id)
def test_json_block_parses(block: Block) -> None:
    json.loads(block.code)


def test_readme_first_lines_are_the_two_commands(tmp_path: Path) -> None:
    """CI reads the demo and the test command from the README's first block; the demo
    runs as written (an install block is not run above)."""
    first = BLOCKS[0]
    assert first.file == "README.md" and first.line <= 5 and first.kind == "install"
    install, test = first.code.strip().splitlines()
    assert install == "pip install . && memlane demo" and test == ".ci/test"
    out = subprocess.run(
        ["memlane", "demo"],
        cwd=tmp_path,
        env=environment({}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert out.returncode == 0, out.stderr
    assert "hybrid search" in out.stdout


@pytest.mark.parametrize(
    "name", ["langchain", "langgraph", "llamaindex", "compat-hnswlib", "compat-rank-bm25"]
)
def test_every_integration_has_a_snippet(name: str) -> None:
    assert NAMED[name].file == "docs/integrations.md"


def test_the_triggers_are_listed_with_their_defaults() -> None:
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    section = text[text.index("## Automatic memory around") : text.index("## The parts")]
    for name, default in [
        ("reflection", "every 10 turns"),
        ("consolidation", "12 short-term entries"),
        ("flush reminder", "25 new entries"),
        ("step compaction", "past 10 steps"),
        ("entry length", "1,500 characters"),
        ("memories per scope", "10,000"),
    ]:
        (row,) = [line for line in section.splitlines() if line.startswith(f"| {name} |")]
        assert default in row


def test_readme_is_a_front_door() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300
