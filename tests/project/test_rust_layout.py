"""The Rust core's layout, read from the source: its modules use each other one way.

Two sibling modules (each with the modules it holds) that use each other are one
concern cut in two, or a shared item kept in the wrong one of them: the item belongs
in the lower of the two, or in a small module both use. A parent and its children are
one module split into files (a child may implement its parent's type), so a parent and
its descendants may use each other.

The check reads paths, not types: every `use` (its braces expanded) and every path that
starts at `crate`, `super`, `self`, a name a `use` brought in or a child module,
followed through the re-exports (`use` lines) of the module it lands in. A glob import
(`use super::*`) is not followed."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REPO

CORE = REPO / "rust" / "core" / "src"

Module = tuple[str, ...]
# An edge's source and target file modules, and the line that makes it.
Edge = tuple[Module, Module, int]

_TOKEN = re.compile(r"\w+|::|[{};*]|\S")
_COMMENT_OR_TEXT = re.compile(
    r"//[^\n]*|/\*.*?\*/"
    r"|(?<!\w)b?r(#*)\".*?\"\1"
    r"|(?<!\w)b?\"(?:\\.|[^\"\\])*\""
    r"|(?<!\w)b?'(?:\\.|[^'\\])'",
    re.DOTALL,
)


def modules(src: Path) -> dict[Module, Path]:
    """Every file module of a crate by its path (`()` is the crate root)."""
    found: dict[Module, Path] = {}
    for path in sorted(src.rglob("*.rs")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        found[tuple(parts)] = path
    return found


def _blank(match: re.Match[str]) -> str:
    """A comment or a literal as spaces, its line breaks kept (so lines still count)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def _tokens(text: str) -> list[tuple[str, int]]:
    code = _COMMENT_OR_TEXT.sub(_blank, text)
    out = []
    line = 1
    at = 0
    for m in _TOKEN.finditer(code):
        line += code.count("\n", at, m.start())
        at = m.start()
        out.append((m.group(0), line))
    return out


def _use_paths(tokens: list[str]) -> list[tuple[list[str], str]]:
    """A `use` tree's leaves as (path, the name it binds); a glob's path is the module
    it reads, and its name `*` binds nothing."""
    out: list[tuple[list[str], str]] = []

    def tree(i: int, prefix: list[str]) -> int:
        path = list(prefix)
        while i < len(tokens):
            t = tokens[i]
            if t == "{":
                i += 1
                while tokens[i] != "}":
                    i = tree(i, path)
                    if tokens[i] == ",":
                        i += 1
                return i + 1
            if t == "::":
                i += 1
                continue
            if t in (",", "}"):
                break
            if t == "as":
                out.append((path[:-1] if path[-1] == "self" else path, tokens[i + 1]))
                return i + 2
            path = [*path, t]
            i += 1
        if path and path[-1] == "self":
            path = path[:-1]
        if path and path[-1] == "*":
            out.append((path[:-1], "*"))
        elif path:
            out.append((path, path[-1]))
        return i

    tree(0, [])
    return out


class _File:
    """One file's `use` leaves, child modules and paths, each with its inline module;
    code built for tests only (`#[cfg(test)]`) is left out."""

    def __init__(self, path: Path) -> None:
        self.uses: list[tuple[tuple[str, ...], list[str], str, int]] = []
        self.children: set[tuple[str, ...]] = set()
        self.paths: list[tuple[tuple[str, ...], list[str], int]] = []
        toks = _tokens(path.read_text(encoding="utf-8"))
        words = [t for t, _ in toks]
        # Each open brace: the inline module it opens (or None), and whether it is test code.
        braces: list[tuple[str | None, bool]] = []
        inline: tuple[str, ...] = ()
        for_tests = False  # the next item is test code
        i = 0
        while i < len(toks):
            t, line = toks[i]
            skip = for_tests or any(test for _, test in braces)
            if t == "#" and "[" in words[i + 1 : i + 3]:
                close = words.index("[", i)
                depth = 0
                while True:
                    depth += {"[": 1, "]": -1}.get(words[close], 0)
                    if depth == 0:
                        break
                    close += 1
                attr = words[i:close]
                for_tests |= "cfg" in attr and "test" in attr and "not" not in attr
                i = close + 1
                continue
            if t == "mod" and i + 2 < len(words):
                if words[i + 2] == "{":
                    braces.append((words[i + 1], for_tests))
                    inline = (*inline, words[i + 1])
                    for_tests = False
                    i += 3
                    continue
                if words[i + 2] == ";" and not skip:
                    self.children.add((*inline, words[i + 1]))
            if t == "{":
                braces.append((None, for_tests))
                for_tests = False
            elif t == "}" and braces and braces.pop()[0] is not None:
                inline = inline[:-1]
            elif t == ";":
                for_tests = False
            elif t == "use" and (i == 0 or words[i - 1] != "::"):
                end = words.index(";", i)
                if not skip:
                    for use_path, name in _use_paths(words[i + 1 : end]):
                        self.uses.append((inline, use_path, name, line))
                for_tests = False
                i = end + 1
                continue
            elif (
                re.fullmatch(r"[A-Za-z_]\w*", t)
                and i + 2 < len(words)
                and words[i + 1] == "::"
                and (i == 0 or words[i - 1] != "::")
            ):
                j = i
                path = [t]
                while (
                    j + 2 < len(words)
                    and words[j + 1] == "::"
                    and re.fullmatch(r"\w+", words[j + 2])
                ):
                    j += 2
                    path.append(words[j])
                if not skip:
                    self.paths.append((inline, path, line))
                i = j + 1
                continue
            i += 1


def edges(src: Path) -> list[Edge]:
    """Every use of one file module by another in the crate at `src`."""
    mods = modules(src)
    files = {m: _File(p) for m, p in mods.items()}

    def absolute(m: Module, inline: tuple[str, ...], path: list[str]) -> list[str] | None:
        here = [*m, *inline]
        head, rest = path[0], path[1:]
        if head == "crate":
            return rest
        if head == "self":
            return here + rest
        if head == "super":
            while path and path[0] == "super":
                here, path = here[:-1], path[1:]
            return here + path
        f = files[m]
        for scope, use_path, name, _ in f.uses:
            if name == head and inline[: len(scope)] == scope:
                whole = absolute(m, scope, use_path)
                return None if whole is None else whole + rest
        if (*inline, head) in f.children:
            return here + path
        return None  # std, another crate, a local name

    def target(whole: list[str]) -> Module:
        """The file module an absolute path lands in, through re-exports."""
        for _ in range(16):
            m = max((k for k in mods if tuple(whole[: len(k)]) == k), key=len)
            if len(whole) == len(m):
                return m
            name = whole[len(m)]
            again = next(
                (
                    absolute(m, (), use_path)
                    for scope, use_path, bound, _ in files[m].uses
                    if scope == () and bound == name
                ),
                None,
            )
            if again is None:
                return m
            whole = again + whole[len(m) + 1 :]
        return m

    found: list[Edge] = []
    for m, f in files.items():
        reads = [(scope, p, line) for scope, p, _, line in f.uses] + f.paths
        for scope, path, line in reads:
            whole = absolute(m, scope, path)
            if whole is None:
                continue
            to = target(whole)
            if to != m:
                found.append((m, to, line))
    return found


def circles(src: Path) -> list[str]:
    """Each pair of sibling modules that use each other, with a line each way."""
    between: dict[tuple[Module, Module], list[Edge]] = defaultdict(list)
    for a, b, line in edges(src):
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        if common in (len(a), len(b)):
            continue  # an ancestor and its descendant
        between[a[: common + 1], b[: common + 1]].append((a, b, line))

    def where(e: Edge) -> str:
        a, b, line = e
        return f"{'/'.join(a) or 'lib'}:{line} uses {'::'.join(b)}"

    return [
        f"{'::'.join(a)} <-> {'::'.join(b)}: {where(ab[0])}; {where(between[b, a][0])}"
        for (a, b), ab in sorted(between.items())
        if a < b and (b, a) in between
    ]


def test_the_core_is_read() -> None:
    found = {(a, b) for a, b, _ in edges(CORE)}
    assert (("engine", "options"), ("fusion",)) in found
    assert (("hnsw", "search"), ("hnsw", "pool")) in found


def test_no_two_modules_of_the_core_use_each_other() -> None:
    assert circles(CORE) == []


LIB = "mod a;\nmod b;\npub mod c;\n"
# b uses a: a.rs closes a circle if it uses b.
B_USES_A = {"b.rs": "use crate::a::Y;"}


@pytest.mark.parametrize(
    ("a", "rest", "flagged"),
    [
        ("use crate::b::X;", B_USES_A, True),
        ("use crate::b::X;", {"b.rs": "pub struct X;"}, False),
        ("fn f() { crate::b::g() }", {"b.rs": "use super::a;"}, True),
        ("use super::{b::{self, X}, c};", {"b.rs": "fn f() { crate::a::g() }"}, True),
        # A path in a test module climbs out of it first.
        ("mod tests { use super::super::b::X; }", B_USES_A, True),
        ("mod tests { use super::b::X; }", B_USES_A, False),
        # Code built for tests only may use a module above.
        ("#[cfg(test)]\nmod tests { use crate::b::X; }", B_USES_A, False),
        ("#[cfg(test)]\nuse crate::b::X;\nfn f() {}", B_USES_A, False),
        ("#[cfg(not(test))]\nuse crate::b::X;", B_USES_A, True),
        # Through a name a `use` brought in, and through a re-export.
        ("use crate::b;\nfn f() { b::g() }", B_USES_A, True),
        (
            "",
            {
                "c/mod.rs": "mod d;\nmod e;\nuse e::X;",
                "c/d.rs": "use super::X;",
                "c/e.rs": "use super::d::Y;",
            },
            True,
        ),
        # Two sibling subtrees.
        (
            "use crate::c::X;",
            {"c/mod.rs": "mod d;\npub struct X;", "c/d.rs": "use crate::a::Y;"},
            True,
        ),
        # A comment or a string is no use.
        ('// crate::b::X\nconst S: &str = "crate::b::g";', B_USES_A, False),
        # A child and its parent are one module.
        ("", {"c/mod.rs": "mod d;\nuse d::X;\npub struct Z;", "c/d.rs": "use super::Z;"}, False),
    ],
)
def test_the_check_tells_apart(a: str, rest: dict[str, str], flagged: bool, tmp_path: Path) -> None:
    (tmp_path / "lib.rs").write_text(LIB, encoding="utf-8")
    for name, text in {"a.rs": a, **rest}.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    found = circles(tmp_path)
    assert bool(found) is flagged, found
