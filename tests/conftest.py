"""Shared fixtures: the default embedder loaded once per session, a cheap stand-in, and
the two storage backends (a PostgreSQL cluster started once per session)."""

from __future__ import annotations

import hashlib
import importlib
import itertools
import os
import re
import sqlite3
import struct
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from chat_server import ScriptedChatServer
from memlane import Memory
from memlane.agent import OpenAIChat
from memlane.embeddings import OnnxEmbedder
from memlane.storage.sqlite import SQLiteStore
from pg_server import PgServer, find_pg_bin

#: The tests folder (helper modules, typecheck/), and the repository above it.
TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


#: Where the in-process server tests send requests: a server without API keys answers
#: only requests made to a loopback address (memlane.server.local).
LOCAL = "http://127.0.0.1"


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """``n`` random unit vectors of ``dim`` components (seeded)."""
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    out: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


@pytest.fixture(scope="session")
def onnx_embedder() -> OnnxEmbedder:
    """The real default model, loaded once for the whole run."""
    return OnnxEmbedder()


class WordHashEmbedder:
    """A deterministic bag-of-words embedder: texts sharing words are similar.

    Each word maps to a fixed random Gaussian direction (seeded by its hash) and a
    text to the normalised sum, so vectors are continuous (few exact ties) and
    the same words in any order give the same vector. For tests that need many
    embeddings fast; it follows the Embedder protocol.
    """

    def __init__(self, dimension: int = 32, name: str = "test:word-hash") -> None:
        self.name = name
        self.dimension = dimension
        self.calls = 0
        self._words: dict[str, np.ndarray] = {}

    def _word(self, word: str) -> np.ndarray:
        v = self._words.get(word)
        if v is None:
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
            self._words[word] = v
        return v

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimension, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            v += self._word(word)
        if not v.any():
            v[0] = 1.0
        return v / np.linalg.norm(v)

    def embed(self, text: str) -> np.ndarray:
        self.calls += 1
        return self._one(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dimension))


class SlowEmbedder(WordHashEmbedder):
    """Embeds a text starting with "slow:" only once ``go`` is set, having set
    ``embedding``: another writer acts while a write waits for its embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding, self.go = threading.Event(), threading.Event()

    def embed_batch(self, texts: Any) -> np.ndarray:
        if any(t.startswith("slow:") for t in texts):
            self.embedding.set()
            self.go.wait(60)
        return super().embed_batch(texts)


class MidwayEmbedder(WordHashEmbedder):
    """Runs ``midway`` once, at its first batch: between a knowledge pipeline's read
    of the owner's documents and its write."""

    def __init__(self) -> None:
        super().__init__()
        self.midway: Callable[[], object] | None = None

    def embed_batch(self, texts: list[str]) -> npt.NDArray[np.float32]:
        if self.midway is not None:
            midway, self.midway = self.midway, None
            midway()
        return super().embed_batch(texts)


def reopen_older_snapshot(store: Path, embedder: Any, **options: Any) -> Memory:
    """``store`` (closed) opened again once its snapshot's ``records.bin`` says one format
    version older than this build's, as a store written by the build before: it warns
    and rebuilds its engine from the database."""
    (records,) = (store / "index").glob("snapshot-*/records.bin")
    data = bytearray(records.read_bytes())
    # The header: magic (8), kind (4), then the format version (rust/core/src/persist.rs).
    (version,) = struct.unpack_from("<I", data, 12)
    struct.pack_into("<I", data, 12, version - 1)
    records.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="older than this build"):
        return Memory(store, embedder, **options)


@pytest.fixture
def word_embedder() -> WordHashEmbedder:
    return WordHashEmbedder()


def trace_sqlite(monkeypatch: pytest.MonkeyPatch, note: Callable[[str], None]) -> None:
    """Every statement the SQLite stores opened from now on run goes to ``note``."""
    connect = SQLiteStore._connect

    def traced(store: SQLiteStore, *args: int) -> sqlite3.Connection:
        conn = connect(store, *args)
        conn.set_trace_callback(note)
        return conn

    monkeypatch.setattr(SQLiteStore, "_connect", traced)


# -- backends -----------------------------------------------------------------------------

_schemas = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A throwaway PostgreSQL cluster for the whole run."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        if os.environ.get("MEMLANE_REQUIRE_PG"):
            pytest.fail("MEMLANE_REQUIRE_PG is set but no PostgreSQL binaries were found")
        pytest.skip(
            "no PostgreSQL server binaries (initdb): install Debian's postgresql package "
            "or set MEMLANE_PG_BIN to the folder holding initdb"
        )
    server = PgServer(bin_dir).start()
    yield server
    server.stop()


class StoreFactory:
    """Opens a test's stores by name on one backend: a directory under ``tmp_path``, or
    a schema of its own in the test cluster (with a snapshot cache under ``tmp_path``)."""

    def __init__(self, backend: str, tmp_path: Path, server: PgServer | None) -> None:
        self.backend = backend
        self.tmp_path = tmp_path
        self.server = server
        self._schemas: dict[str, str] = {}
        # Weak: a test may drop a store to see what its finalizer does.
        self.opened: weakref.WeakSet[Memory] = weakref.WeakSet()

    def location(self, name: str) -> str | Path:
        if self.server is None:
            return self.tmp_path / name
        if name not in self._schemas:
            self._schemas[name] = f"t{next(_schemas)}_{name.replace('-', '_')}"
        return self.server.url(schema=self._schemas[name])

    def __call__(self, name: str, embedder: Any = None, **options: Any) -> Memory:
        if self.server is not None:
            options.setdefault("cache_dir", self.tmp_path / "cache" / name)
        mem = Memory(self.location(name), embedder, **options)
        self.opened.add(mem)
        return mem

    def close_all(self) -> None:
        """Closes the stores a test left open (their background threads would outlive
        the test, and a PostgreSQL one would keep calling a stopped server)."""
        for mem in list(self.opened):
            mem.close()


@pytest.fixture(params=["embedded", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """The Memory contract runs on both backends: each test using this runs twice."""
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    factory = StoreFactory(request.param, tmp_path, server)
    yield factory
    factory.close_all()


# -- agent tests: a store on both backends and the scripted model ---------------------------


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    """An agent's store, on both backends (a test file may define its own ``mem``)."""
    m = make_store("agent", word_embedder)
    yield m
    m.close()


@pytest.fixture
def server() -> Iterator[ScriptedChatServer]:
    """The scripted chat-completions server (tests/chat_server.py) on loopback."""
    with ScriptedChatServer() as s:
        yield s


@pytest.fixture
def llm(server: ScriptedChatServer) -> Iterator[OpenAIChat]:
    """A client of :func:`server` that never retries and gives up after 5 s."""
    with OpenAIChat("scripted", base_url=server.base_url, max_retries=0, timeout=5) as c:
        yield c


@pytest.fixture(scope="session")
def hnswlib_peer() -> ModuleType:
    """hnswlib, the peer ``memlane.compat.hnswlib`` is held to."""
    if os.environ.get("MEMLANE_REQUIRE_PEERS"):
        return importlib.import_module("hnswlib")  # CI: a missing peer fails, never skips
    return pytest.importorskip("hnswlib")


@pytest.fixture
def local(word_embedder: WordHashEmbedder, tmp_path: Path) -> Iterator[Memory]:
    """An embedded store of the word-hash embedder, closed after the test."""
    m = Memory(tmp_path / "store", word_embedder)
    yield m
    m.close()
