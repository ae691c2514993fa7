"""The package's layout rules, read from the source: helpers live where their users
are, so no module reaches into another package's private names, and files stay short
enough to read in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "python" / "memlane"
MAX_LINES = 600
# The native extension is private by maturin's convention, and every layer uses it.
EXEMPT = "memlane._core"


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["memlane", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _package_of(module: str, path: Path) -> str:
    """The package a module belongs to: itself for an __init__.py, else its parent."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_imports(module: str, path: Path) -> list[str]:
    """Every private memlane module or name `module` imports from outside its package,
    as "line: name".

    A private module may be imported from the package that holds it (memory.py, in
    memlane, opens memlane._memory) and from inside it; a private name only from a
    module of the importer's own package."""
    package = _package_of(module, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []

    def check_module(target: str, line: int) -> None:
        if target != "memlane" and not target.startswith("memlane."):
            return
        if target == EXEMPT or target.startswith(EXEMPT + "."):
            return
        parts = target.split(".")
        for i, part in enumerate(parts):
            if not _private(part):
                continue
            owner = ".".join(parts[:i])
            inside = ".".join(parts[: i + 1])
            if owner != package and package != inside and not package.startswith(inside + "."):
                found.append(f"{line}: {target}")
            return

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, package)
            check_module(target, node.lineno)
            if not target.startswith("memlane") or target == EXEMPT:
                continue
            holder = MODULES.get(target)
            holder_package = target if holder is None else _package_of(target, holder)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in MODULES:
                    # `from memlane.pkg import _mod` imports a module, checked as one.
                    check_module(full, node.lineno)
                elif full != EXEMPT and _private(alias.name) and holder_package != package:
                    found.append(f"{node.lineno}: {full}")
    return found


MODULES = _modules()


def test_the_module_list_is_read() -> None:
    assert "memlane.memory" in MODULES and "memlane._memory.memory_store" in MODULES


def test_no_module_imports_a_private_name_of_another_package() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{hit}"
        for name, path in MODULES.items()
        for hit in private_imports(name, path)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "flagged"),
    [
        ("memlane.memory", "from memlane._memory.memory_store import MemoryStore", False),
        ("memlane._memory.writer", "from memlane._memory.sync import IndexSync", False),
        ("memlane.knowledge.api", "from memlane._memory.memory_store import MemoryStore", True),
        ("memlane.agent.memory_tools", "from memlane.notes import _latest", True),
        ("memlane.agent.memory_tools", "from memlane.agent.loop import _helper", False),
        ("memlane.memory", "from memlane.embeddings import _base", True),
        ("memlane.memory", "import memlane.embeddings._base", True),
        ("memlane.knowledge.api", "from memlane import _memory", True),
        ("memlane.cli.agent", "from memlane.cli._command import open_memory", False),
        ("memlane.agent.memory_tools", "from memlane._core import Engine, __version__", False),
        ("memlane.agent.memory_tools", "from memlane.agent import __all__", False),
    ],
)
def test_the_check_tells_apart(module: str, source: str, flagged: bool, tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(source + "\n", encoding="utf-8")
    found = private_imports(module, path)
    assert bool(found) is flagged, found


def test_no_file_is_over_the_line_limit() -> None:
    long = {}
    for path in PACKAGE.rglob("*.py"):
        with path.open(encoding="utf-8") as f:
            count = sum(1 for _ in f)
        if count > MAX_LINES:
            long[str(path.relative_to(PACKAGE.parent))] = count
    assert long == {}
