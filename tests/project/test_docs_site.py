"""The documentation site builds (``mkdocs build --strict``) and its API reference reads
as mkdocstrings renders it for a reader, not as the docstrings' source: no raw Sphinx
role (``:class:`...```) on any page, no private name or constant's name where a
signature shows a default, every class that takes arguments with its constructor's
signature, and ``AsyncMemory``'s page with every method it has.

Needs the ``docs`` extra (mkdocs, mkdocstrings): skipped without it, a failure where
``MEMLANE_REQUIRE_DOCS`` is set (``.ci/run``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import memlane
from conftest import REPO

ROOT = REPO
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|obj|exc|ref):`?[~\w.]")
# A default that names a constant (DEFAULT_EMBEDDER, BATCH_SIZE, _core.DEFAULT_ALPHA)
# instead of showing its value.
NAMED_DEFAULT = re.compile(r"=\s*((?:\w+\.)*(?:_\w+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+))\b")
PRIVATE = re.compile(r"(?<![\w.])_core\.")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [m for m in ("mkdocs", "mkdocstrings_handlers.python") if not _importable(m)]
    if missing:
        message = f"the docs extra is not installed ({', '.join(missing)} missing)"
        if os.environ.get("MEMLANE_REQUIRE_DOCS"):
            pytest.fail(f"MEMLANE_REQUIRE_DOCS is set but {message}")
        pytest.skip(message)
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stderr[-6000:]}"
    return out


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class _Page(HTMLParser):
    """A built page: its article's text, and the text of each signature block."""

    def __init__(self, source: str, *, whole: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.signatures: list[str] = []
        self.ids: list[str] = []
        self._stack: list[str] = []
        # A page's text is its article's (not the navigation's); a fragment is all text.
        self._article = 1 if whole else 0
        self._signature: int | None = None
        self._skip = 0
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "img", "input", "meta", "link", "hr", "wbr"):
            return
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        self._stack.append(tag)
        if tag == "article":
            self._article += 1
        if tag in ("script", "style"):
            self._skip += 1
        if found.get("id"):
            self.ids.append(found["id"] or "")
        if self._signature is None and "doc-signature" in classes:
            self._signature = len(self._stack)
            self.signatures.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag not in self._stack:
            return
        while self._stack:
            if self._signature is not None and len(self._stack) == self._signature:
                self._signature = None
            top = self._stack.pop()
            if top == "article":
                self._article -= 1
            if top in ("script", "style"):
                self._skip -= 1
            if top == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._skip or not self._article:
            return
        self.text.append(data)
        if self._signature is not None:
            self.signatures[-1] += data


def _pages(site: Path) -> dict[str, _Page]:
    return {
        str(path.relative_to(site)): _Page(path.read_text(encoding="utf-8"))
        for path in sorted(site.rglob("*.html"))
        if path.name != "404.html"
    }


@pytest.fixture(scope="module")
def pages(site: Path) -> dict[str, _Page]:
    return _pages(site)


def test_no_raw_role_reaches_a_page(pages: dict[str, _Page]) -> None:
    raw = []
    for name, page in pages.items():
        text = " ".join("".join(page.text).split())
        raw += [
            f"{name}: ...{text[max(0, m.start() - 60) : m.end() + 40]}..."
            for m in ROLE.finditer(text)
        ]
    assert not raw, "raw Sphinx roles in the built site:\n" + "\n".join(raw)


def test_signatures_show_default_values(pages: dict[str, _Page]) -> None:
    named = []
    for name, page in pages.items():
        if not name.startswith("reference/"):
            continue
        text = "".join(page.text)
        # The extension's private name, as a signature's default or a parameter's.
        named += [
            f"{name}: ...{text[max(0, m.start() - 60) : m.end() + 30]}..."
            for m in PRIVATE.finditer(text)
        ]
        for signature in page.signatures:
            named += [f"{name}: {m.group(1)}" for m in NAMED_DEFAULT.finditer(signature)]
    assert not named, "defaults shown as a name, not a value:\n" + "\n".join(named)


def _documented(ident: str) -> object:
    """The object a heading documents, imported (None when it cannot be)."""
    parts = ident.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


def _reference_classes(site: Path) -> dict[str, type]:
    """The classes the reference documents, by the id of their heading."""
    found = {}
    for path in sorted((site / "reference").rglob("*.html")):
        source = path.read_text(encoding="utf-8")
        for ident in re.findall(r'<h\d id="(memlane\.[\w.]+)"', source):
            obj = _documented(ident)
            if inspect.isclass(obj):
                found[ident] = obj
    return found


def test_classes_show_their_constructor(site: Path, pages: dict[str, _Page]) -> None:
    classes = _reference_classes(site)
    assert "memlane.Memory" in classes and "memlane.AsyncMemory" in classes
    text = "\n".join(s for page in pages.values() for s in page.signatures)
    missing = []
    for ident, cls in classes.items():
        try:
            params = list(inspect.signature(cls).parameters.values())
        except (TypeError, ValueError):
            continue
        if not params or params[0].kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        first = re.escape(params[0].name)
        if not re.search(rf"(?m)^{re.escape(cls.__name__)}\(\s*{first}\b", text):
            missing.append(f"{ident}({params[0].name}, ...)")
    assert not missing, "classes shown without their constructor's signature:\n" + "\n".join(
        missing
    )


def test_async_memory_page_lists_every_method(site: Path) -> None:
    page = (site / "reference" / "memory" / "index.html").read_text(encoding="utf-8")
    forwarded = {
        name: value.__wrapped__
        for name, value in vars(memlane.AsyncMemory).items()
        if inspect.iscoroutinefunction(value) and hasattr(value, "__wrapped__")
    }
    assert forwarded, "AsyncMemory forwards no method: the check below would check nothing"
    missing = [name for name in forwarded if f'id="memlane.AsyncMemory.{name}"' not in page]
    assert not missing, f"AsyncMemory's page leaves out {missing}"
    for name, twin in forwarded.items():
        # The method's entry: from its heading to the next one.
        start = page.index(f'id="memlane.AsyncMemory.{name}"')
        end = page.find('class="doc doc-heading"', page.index(">", start))
        entry = page[start : end if end > 0 else len(page)]
        assert "doc-label-async" in entry, f"AsyncMemory.{name} is not shown as async"
        signatures = _Page(entry[entry.index(">") + 1 :], whole=True).signatures
        signature = signatures[0] if signatures else ""
        # Shown with its Memory twin's parameters.
        params = [p for p in inspect.signature(twin).parameters if p != "self"]
        absent = [p for p in params if not re.search(rf"\b{p}\b", signature)]
        assert not absent, f"AsyncMemory.{name}'s signature lacks {absent}: {signature!r}"
