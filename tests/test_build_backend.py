"""The build backend pyproject.toml names (build_backend/memlane_build.py): without cargo
on PATH every hook stops at once with a message naming rustup, where maturin's own
backend asks for puccinialin and downloads a Rust toolchain; with cargo it hands over
to maturin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("maturin", reason="maturin is not installed (the dev extra has it)")

REPO = Path(__file__).resolve().parents[1]


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
