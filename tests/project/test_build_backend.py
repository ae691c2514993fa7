"""The build backend pyproject.toml names (build_backend/memlane_build.py): without cargo
on PATH every hook stops at once with a message naming rustup, where maturin's own
backend asks for puccinialin and downloads a Rust toolchain; with cargo it hands over
to maturin."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import REPO

pytest.importorskip("maturin", reason="maturin is not installed (the dev extra has it)")


def _call(module: str, hook: str, args: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``module.hook(args)`` in a fresh interpreter whose PATH is ``path`` alone, run
    from the repository's root, as a build frontend runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATURIN")}
    env["PATH"] = str(path)
    env["PYTHONPATH"] = str(REPO / "build_backend")
    code = f"import {module}; print(repr({module}.{hook}({args})))"
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("hook", "args"),
    [
        ("get_requires_for_build_wheel", ""),
        ("get_requires_for_build_sdist", ""),
        ("get_requires_for_build_editable", ""),
        ("prepare_metadata_for_build_wheel", "'out'"),
        ("prepare_metadata_for_build_editable", "'out'"),
        ("build_wheel", "'out'"),
        ("build_sdist", "'out'"),
        ("build_editable", "'out'"),
    ],
)
def test_without_cargo_every_hook_stops_and_names_rustup(
    tmp_path: Path, hook: str, args: str
) -> None:
    done = _call("memlane_build", hook, args, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cargo is not on PATH" in done.stderr
    assert "https://rustup.rs" in done.stderr
    assert done.stdout == ""
    assert not (REPO / "out").exists()


def test_maturin_alone_would_download_a_toolchain(tmp_path: Path) -> None:
    """Why the wrapper exists: maturin's backend, without cargo, asks the frontend for
    puccinialin, which then downloads Rust into a temporary directory."""
    done = _call("maturin", "get_requires_for_build_wheel", "", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "puccinialin" in done.stdout


def test_with_cargo_the_hooks_are_maturins(tmp_path: Path) -> None:
    cargo = tmp_path / "cargo"
    cargo.write_text("#!/bin/sh\necho 'cargo 1.89.0'\n")
    cargo.chmod(0o755)
    done = _call("memlane_build", "get_requires_for_build_wheel", "", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist .ci/test built (``MEMLANE_SDIST``), else one built here (needs cargo)."""
    if built := os.environ.get("MEMLANE_SDIST"):
        return Path(built)
    if shutil.which("cargo") is None:
        pytest.skip("building an sdist needs cargo (.ci/test gives the one it built)")
    out = tmp_path_factory.mktemp("sdist")
    maturin = Path(sys.executable).parent / "maturin"
    subprocess.run([str(maturin), "sdist", "--out", str(out)], cwd=REPO, check=True)
    (found,) = out.glob("memlane-*.tar.gz")
    return found


def test_the_sdist_holds_the_guide_the_backend_names(sdist: Path) -> None:
    sys.path.insert(0, str(REPO / "build_backend"))
    try:
        import memlane_build
    finally:
        sys.path.remove(str(REPO / "build_backend"))
    named = set(re.findall(r"[\w/]+\.md", memlane_build.MISSING_CARGO))
    assert named == {"docs/install.md"}
    with tarfile.open(sdist) as archive:
        (top,) = {name.split("/")[0] for name in archive.getnames()}
        held = {name.removeprefix(top + "/") for name in archive.getnames()}
    assert named <= held
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(docs/install.md)" in readme and "README.md" in held
