"""memlane's PEP 517 build backend: maturin's, after a check that Rust's cargo is on PATH.

When cargo is missing, maturin's own backend downloads a Rust toolchain into a
temporary directory (through puccinialin: about 700 MB, behind pip's progress line).
Only the environment variable MATURIN_NO_INSTALL_RUST turns that off, and
pyproject.toml cannot set one, so pyproject.toml names this module instead
(``backend-path``): every hook fails at once with a message that says what to
install, or else hands over to maturin unchanged.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from typing import TypeVar

import maturin

MISSING_CARGO = """
memlane: building from source needs Rust's cargo, and cargo is not on PATH.

Install Rust with rustup (https://rustup.rs), open a new shell, and run this again:
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh
(on Windows, run rustup-init.exe from https://rustup.rs).

A memlane wheel installs without Rust: see docs/install.md.
"""

Hook = TypeVar("Hook", bound=Callable[..., object])


def _needs_cargo(hook: Hook) -> Hook:
    @functools.wraps(hook)
    def checked(*args: object, **kwargs: object) -> object:
        if shutil.which("cargo") is None:
            raise SystemExit(MISSING_CARGO)
        return hook(*args, **kwargs)

    return checked  # type: ignore[return-value]


get_requires_for_build_wheel = _needs_cargo(maturin.get_requires_for_build_wheel)
get_requires_for_build_sdist = _needs_cargo(maturin.get_requires_for_build_sdist)
get_requires_for_build_editable = _needs_cargo(maturin.get_requires_for_build_editable)
prepare_metadata_for_build_wheel = _needs_cargo(maturin.prepare_metadata_for_build_wheel)
prepare_metadata_for_build_editable = _needs_cargo(maturin.prepare_metadata_for_build_editable)
build_wheel = _needs_cargo(maturin.build_wheel)
build_sdist = _needs_cargo(maturin.build_sdist)
build_editable = _needs_cargo(maturin.build_editable)
