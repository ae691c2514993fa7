"""memlane.Memory end to end: the public API on the real default embedder, dedup, bad input,
threads, persistence round trips and JSON Lines export/import.

Tests taking ``make_store`` are the store's contract and run on both backends
(embedded and PostgreSQL); the others are about the embedded directory itself."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from conftest import StoreFactory, WordHashEmbedder
from memlane import (
    AsyncMemory,
    DimensionMismatchError,
    EmbedderMismatchError,
    EmbedderUnavailableError,
    InvalidArgumentError,
    Memory,
    MemoryRecord,
    SearchHit,
    StoreLockedError,
    UnknownIdError,
)
from memlane.records import SCOPE_FIELDS

FACTS = [
    ("User prefers dark mode in every app", "alice"),
    ("The user lives in Paris and works remotely", "alice"),
    ("Deploy the service with docker compose on Fridays", "alice"),
    ("Bob is allergic to peanuts", "bob"),
    ("Bob's favourite colour is green", "bob"),
]


@pytest.fixture
def store(make_store: StoreFactory, onnx_embedder: memlane.OnnxEmbedder) -> Iterator[Memory]:
    mem = make_store("store", onnx_embedder)
    yield mem
    mem.close()


def test_exports() -> None:
    for name in ("Memory", "AsyncMemory", "MemoryRecord", "SearchHit", "StoreLockedError"):
        assert name in memlane.__all__


def test_import_is_lazy() -> None:
    code = "import sys, memlane; print('onnxruntime' in sys.modules, 'httpx' in sys.modules)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_end_to_end_on_the_default_embedder(store: Memory) -> None:
    recs = store.add_many(
        [{"text": t, "agent_id": "assistant", "user_id": u, "importance": 0.5} for t, u in FACTS]
    )
    assert [r.text for r in recs] == [t for t, _ in FACTS]
    rec = store.add(
        "User likes dark themes at night",
        agent_id="assistant",
        user_id="alice",
        importance=0.8,
        metadata={"source": "telegram"},
    )
    assert isinstance(rec, MemoryRecord) and rec.metadata == {"source": "telegram"}
    assert rec.access_count == 0 and rec.created_at == rec.last_accessed_at
    assert len(store) == 6

    hits = store.search("dark mode preferences", k=3, user_id="alice", explain=True)
    assert all(isinstance(h, SearchHit) for h in hits)
    assert {h.record.text for h in hits[:2]} == {FACTS[0][0], rec.text}
    assert all(h.record.user_id == "alice" for h in hits)
    assert hits[0].explain is not None and set(hits[0].explain) >= {"bm25", "cosine", "boost"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    # Vector mode with elizaOS's threshold on cosine similarity; text mode.
    vec = store.search("Where does the user live?", mode="vector", threshold=0.5, explain=True)
    assert vec and vec[0].record.text == FACTS[1][0]
    assert all(h.explain and h.explain["cosine"] >= 0.5 for h in vec)  # type: ignore[operator]
    assert store.search("peanuts", mode="text", k=1)[0].record.user_id == "bob"
    assert store.search("peanuts", filters={"source": "telegram"}, mode="text") == []
    only = store.search("dark", filters={"source": {"$in": ["telegram"]}})
    assert [h.record.id for h in only] == [rec.id]

    # The recall was recorded.
    got = store.get(hits[0].record.id)
    assert got.access_count >= 1 and got.last_accessed_at > got.created_at

    updated = store.update(rec.id, text="User likes light themes", importance=0.2)
    assert updated.text == "User likes light themes" and updated.importance == 0.2
    assert store.get(rec.id).content_hash == updated.content_hash != rec.content_hash
    top = store.search("light themes", k=1, mode="vector", track_access=False)
    assert top[0].record.id == rec.id

    assert store.count() == 6 and store.count(user_id="bob") == 2
    history = store.list(user_id="alice", order="asc")
    assert [r.text for r in history][:3] == [t for t, _ in FACTS[:3]]
    store.delete(rec.id)
    with pytest.raises(UnknownIdError):
        store.get(rec.id)
    assert store.delete_all(user_id="bob") == 2
    assert store.count() == 3
    assert all(h.record.user_id != "bob" for h in store.search("peanuts allergy"))

    got = store.get(recs[0].id, include_embedding=True)
    assert got.embedding is not None and got.embedding.shape == (384,)
    assert "embedding" not in repr(got)
    assert got.to_dict()["embedding"] is not None and "embedding" not in got.to_dict(
        embedding=False
    )
    # Every stored field in declaration order, plain values, the metadata a copy.
    stored = [f for f in got.__dataclass_fields__ if f not in ("duplicate", "duplicate_of")]
    plain = got.to_dict()
    assert list(plain) == stored
    assert plain["embedding"] == [float(x) for x in got.embedding]
    assert list(got.to_dict(embedding=False)) == [f for f in stored if f != "embedding"]
    plain["metadata"]["added"] = 1
    assert "added" not in got.metadata


def test_query_embedding_skips_the_embedder(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    with make_store("s", emb) as mem:
        mem.add("alpha beta", embedding=emb.embed("alpha beta"))
        calls = emb.calls
        hits = mem.search("alpha", query_embedding=emb.embed("alpha beta"))
        assert emb.calls == calls + 1  # only the embed() just above
        assert hits[0].record.text == "alpha beta"
        # The cache: the same query twice embeds once.
        mem.search("gamma")
        mem.search("gamma")
        assert emb.calls == calls + 2


def test_a_repeated_question_sees_every_change(make_store: StoreFactory) -> None:
    """The engine reuses a repeated question's retrieval while nothing changes; each
    kind of change shows in the very next search, and the scores it returns are
    computed afresh (access counts included)."""
    with make_store("s", WordHashEmbedder()) as mem:
        mem.add_many([{"text": f"garden note {i} about roses"} for i in range(30)])
        q = "tulip bulbs in the garden"

        def top() -> list[str]:
            return [h.record.text for h in mem.search(q, k=3, candidates=3)]

        assert "tulip" not in top()[0]
        tulips = mem.add("tulip bulbs planted in the garden")
        assert top()[0] == tulips.text
        mem.update(tulips.id, text="daffodils in the garden")
        assert tulips.text not in top()
        moved = mem.supersede(tulips.id, "tulip bulbs in the garden, all of them")
        assert top()[0] == moved.text
        mem.delete(moved.id)
        assert moved.text not in top()
        mem.wait_indexed()
        hits = mem.search(q, k=3, explain=True)
        again = mem.search(q, k=3, explain=True)
        assert [h.record.id for h in again] == [h.record.id for h in hits]
        assert [h.record.access_count for h in again] == [h.record.access_count + 1 for h in hits]
        assert [h.explain["cosine"] for h in again] == [h.explain["cosine"] for h in hits]


def test_text_only_store_never_needs_an_embedder(make_store: StoreFactory) -> None:
    with make_store("t", embedder=None) as mem:
        mem.add("the quick brown fox", agent_id="a")
        mem.add("lazy dogs sleep", agent_id="a")
        assert mem.search("fox")[0].record.text == "the quick brown fox"
        assert mem.search("dogs", mode="text")[0].record.text == "lazy dogs sleep"
        with pytest.raises(InvalidArgumentError):
            mem.add("x", embedding=[1.0, 2.0])
    with pytest.raises(EmbedderMismatchError, match="text only"):
        make_store("t", WordHashEmbedder())
    with make_store("t", WordHashEmbedder(), reembed=True) as mem:
        assert mem.search("fox", mode="vector")[0].record.text == "the quick brown fox"


def test_a_text_only_store_checks_a_query_vector_it_does_not_use(
    make_store: StoreFactory,
) -> None:
    """As the integrations send one with every hybrid search: searched as text, and
    refused only when it is no vector at all."""
    with make_store("t", embedder=None) as mem:
        mem.add("the quick brown fox")
        hits = mem.search("fox", query_embedding=np.array([0.6, 0.8], dtype=np.float32))
        assert [h.record.text for h in hits] == ["the quick brown fox"]
        for bad in ("abc", [[1.0]], [], [float("nan"), 1.0]):
            with pytest.raises(InvalidArgumentError, match="query_embedding"):
                mem.search("fox", query_embedding=bad)


def test_embedder_is_pinned(make_store: StoreFactory) -> None:
    make_store("p", WordHashEmbedder(32)).close()
    with pytest.raises(EmbedderMismatchError) as e:
        make_store("p", WordHashEmbedder(16, name="test:other"))
    assert "test:word-hash" in str(e.value) and "test:other" in str(e.value)
    assert "reembed=True" in str(e.value)


class Unusable(WordHashEmbedder):
    """A new model whose answers no write may store: a number short, all zeros, or a
    row short."""

    def __init__(self, how: str) -> None:
        super().__init__(16, name="test:new")
        self.how = how

    def embed_batch(self, texts: Any) -> Any:
        out = super().embed_batch(texts)
        if self.how == "short":
            return out[:, :-1]
        if self.how == "zeros":
            out[-1] = 0.0
            return out
        return out[:-1]


@pytest.mark.parametrize("how", ["short", "zeros", "a row short"])
def test_reembed_checks_the_new_models_answers_and_keeps_the_old_vectors(
    make_store: StoreFactory, how: str
) -> None:
    """``reembed=True`` wrote the new vectors unchecked: one a number short committed a
    store no embedder could open again, an all-zero one a vector an add refuses."""
    with make_store("r", WordHashEmbedder()) as mem:
        for i in range(20):
            mem.add(f"note {i} about apples", id=f"n{i}")
    with pytest.raises(EmbedderUnavailableError, match="test:new"):
        make_store("r", Unusable(how), reembed=True)
    with pytest.raises(EmbedderMismatchError):
        make_store("r", WordHashEmbedder(16, name="test:new"))
    with make_store("r", WordHashEmbedder()) as mem:
        assert mem.search("note 3 apples", mode="vector")[0].record.id == "n3"


def test_default_scope_and_scope_kwargs(make_store: StoreFactory) -> None:
    with make_store("s", WordHashEmbedder(), default_scope={"agent_id": "bot"}) as mem:
        r = mem.add("hello world")
        assert r.agent_id == "bot"
        mem.add("hello world again", agent_id="other")
        assert [h.record.agent_id for h in mem.search("hello")] == ["bot"]
        assert mem.count() == 1 and mem.count(agent_id="other") == 1
        # Scope fields are keyword parameters: a misspelt one is Python's TypeError.
        with pytest.raises(TypeError, match="colour"):
            mem.search("hello", colour="red")  # type: ignore[call-arg]
        with pytest.raises(InvalidArgumentError, match="agent_id must be a str"):
            mem.search("hello", agent_id=7)  # type: ignore[arg-type]
    # default_scope is a mapping, so its fields are still checked by name.
    with pytest.raises(InvalidArgumentError, match="scope fields"):
        make_store("t", WordHashEmbedder(), default_scope={"colour": "red"})


def test_list_time_ranges_and_order(make_store: StoreFactory) -> None:
    with make_store("s", WordHashEmbedder()) as mem:
        for i in range(10):
            mem.add(f"message {i}", room_id="r1", created_at=1000.0 + i, table="messages")
        mem.add("elsewhere", room_id="r2", created_at=1005.0, table="messages")
        got = mem.list("messages", start=1002, end=1006, room_id="r1")
        assert [r.text for r in got] == [f"message {i}" for i in (5, 4, 3, 2)]
        got = mem.list("messages", room_id="r1", limit=3, order="asc", offset=1)
        assert [r.created_at for r in got] == [1001.0, 1002.0, 1003.0]
        assert mem.count("messages", start=1005) == 6
        assert mem.list("memories") == []


def test_dedup_exact_near_and_window(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    with make_store("d", emb, dedup_threshold=0.95) as mem:
        a = mem.add("User prefers dark mode", agent_id="x", unique=True)
        assert a.unique and a.duplicate is None
        same = mem.add("  user prefers DARK mode ", agent_id="x", unique=True)
        assert (same.id, same.duplicate, same.duplicate_of) == (a.id, "exact", a.id)
        # Another scope is another partition.
        other = mem.add("User prefers dark mode", agent_id="y", unique=True)
        assert other.id != a.id and other.unique
        # Near: same words reordered embed identically under the word-hash model.
        near = mem.add("dark mode user prefers", agent_id="x", unique=True)
        assert near.id != a.id and not near.unique
        assert (near.duplicate, near.duplicate_of) == ("near", a.id)
        assert mem.count(agent_id="x") == 2
        # Within one batch.
        recs = mem.add_many(
            [
                {"text": "fresh fact", "agent_id": "z", "unique": True},
                {"text": "Fresh  fact", "agent_id": "z", "unique": True},
            ]
        )
        assert recs[1].id == recs[0].id and recs[1].duplicate == "exact"
        # OrcBot's window: the same message id, or source + contact + text.
        m1 = mem.add("hi", metadata={"message_id": 7, "source": "tg", "contact": "c"})
        m2 = mem.add("hi again", metadata={"message_id": 7})
        assert (m2.id, m2.duplicate) == (m1.id, "window")
        m3 = mem.add("hi", metadata={"source": "tg", "contact": "c"})
        assert (m3.id, m3.duplicate) == (m1.id, "window")
        m4 = mem.add("hi", metadata={"source": "tg", "contact": "d"})
        assert m4.id != m1.id
    with make_store("d", emb, near_duplicate="skip") as mem:
        skipped = mem.add("prefers user dark mode", agent_id="x", unique=True)
        assert skipped.duplicate == "near" and skipped.id in (a.id, near.id)
        # The window survives a reopen.
        again = mem.add("hi", metadata={"message_id": 7})
        assert again.id == m1.id
        # A bulk delete ends the window's memory of what it deleted.
        assert mem.delete_all(table="memories", agent_id=None) >= 1
        fresh = mem.add("hi", metadata={"message_id": 7})
        assert fresh.duplicate is None and fresh.id != m1.id


def test_bad_input_raises_and_changes_nothing(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    with make_store("b", emb) as mem:
        keep = mem.add("kept", agent_id="a")
        before = (mem.count(), len(mem), [r.id for r in mem.list()])
        bad_adds = [
            ({"text": ""}, InvalidArgumentError),
            ({"text": "   "}, InvalidArgumentError),
            ({"text": 3}, InvalidArgumentError),
            ({"text": "x", "importance": float("nan")}, InvalidArgumentError),
            ({"text": "x", "importance": 2.0}, InvalidArgumentError),
            ({"text": "x", "embedding": [1.0, 2.0]}, DimensionMismatchError),
            ({"text": "x", "embedding": [float("nan")] * 32}, InvalidArgumentError),
            ({"text": "x", "embedding": [0.0] * 32}, InvalidArgumentError),
            ({"text": "x", "metadata": {"a": object()}}, InvalidArgumentError),
            ({"text": "x", "metadata": {"a": float("inf")}}, InvalidArgumentError),
            ({"text": "x", "id": keep.id}, InvalidArgumentError),
            ({"text": "x", "colour": 1}, InvalidArgumentError),
            ({"text": "x", "agent_id": ""}, InvalidArgumentError),
        ]
        for item, error in bad_adds:
            with pytest.raises(error):
                mem.add_many([{"text": "fine"}, item])
        # Only the engine refuses this one (metadata nested too deep), and it does so
        # while SQLite is writing the batch: the transaction must roll back.
        deep: dict[str, object] = {}
        for _ in range(40):
            deep = {"k": deep}
        batch = [{"text": f"fine {i}"} for i in range(300)] + [{"text": "x", "metadata": deep}]
        with pytest.raises(InvalidArgumentError, match="nested"):
            mem.add_many(batch)
        with pytest.raises(InvalidArgumentError, match="nested"):
            mem.add("x", metadata=deep)
        with pytest.raises(UnknownIdError):
            mem.get("nope")
        with pytest.raises(UnknownIdError):
            mem.delete("nope")
        with pytest.raises(UnknownIdError):
            mem.update("nope", importance=0.1)
        with pytest.raises(InvalidArgumentError):
            mem.update(keep.id, importance=-1)
        with pytest.raises(InvalidArgumentError):
            mem.update(keep.id, text="")
        with pytest.raises(DimensionMismatchError):
            mem.search("x", query_embedding=[1.0, 2.0])
        with pytest.raises(InvalidArgumentError, match=r"\$regex"):
            mem.search("x", filters={"a": {"$regex": "x"}})
        with pytest.raises(InvalidArgumentError):
            mem.search("x", mode="fuzzy")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            mem.search("x", k=0)
        with pytest.raises(InvalidArgumentError):
            mem.search("")
        with pytest.raises(InvalidArgumentError):
            mem.search("x", weights={"fun": 1.0})
        assert (mem.count(), len(mem), [r.id for r in mem.list()]) == before
        assert mem.get(keep.id).importance == 0.5


def test_second_open_fails_at_once(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "l", WordHashEmbedder())
    try:
        with pytest.raises(StoreLockedError, match="already open"):
            Memory(tmp_path / "l", WordHashEmbedder())
        code = (
            "import sys, memlane\n"
            "from memlane.errors import StoreLockedError\n"
            "try:\n    memlane.Memory(sys.argv[1], embedder=None)\n"
            "except StoreLockedError as e:\n    print('locked', e)\n"
        )
        import subprocess

        # This process holds the store until the child is done: a lock that waited for
        # it would hang the child until its timeout.
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "l")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.stdout.startswith("locked"), out.stderr
    finally:
        mem.close()
    Memory(tmp_path / "l", WordHashEmbedder()).close()


def test_threads_share_one_memory(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    errors: list[BaseException] = []
    with make_store("c", emb) as mem:

        def writer(t: int) -> None:
            try:
                for i in range(40):
                    mem.add(f"thread {t} note {i}", agent_id=f"a{t}")
            except BaseException as e:  # pragma: no cover
                errors.append(e)

        def reader(t: int) -> None:
            try:
                for _ in range(60):
                    for h in mem.search("note", agent_id=f"a{t}", k=5):
                        assert h.record.agent_id == f"a{t}"
            except BaseException as e:  # pragma: no cover
                errors.append(e)

        pairs = [(f, t) for t in range(3) for f in (writer, reader)]
        threads = [threading.Thread(target=f, args=(t,)) for f, t in pairs]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        assert mem.count() == 120 and all(mem.count(agent_id=f"a{t}") == 40 for t in range(3))


def test_reopen_keeps_everything(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    with make_store("r", emb) as mem:
        recs = mem.add_many([{"text": f"fact number {i}", "room_id": "r"} for i in range(300)])
        mem.delete(recs[0].id)
        mem.update(recs[1].id, text="changed fact", metadata={"k": 1})
        mem.search("fact", k=3)
        expected = mem.search("number 7", k=5, track_access=False)
    with make_store("r", emb) as mem:
        assert len(mem) == 299
        again = mem.search("number 7", k=5, track_access=False)
        # Scores do not depend on the clock (ages count from the newest candidate).
        assert [h.record for h in again] == [h.record for h in expected]
        assert [h.score for h in again] == pytest.approx([h.score for h in expected], abs=1e-4)
        hit = mem.search("changed", filters={"k": 1}, track_access=False)
        assert hit[0].record.id == recs[1].id
        assert sum(r.access_count for r in mem.list(limit=1000)) == 3


def test_missing_or_corrupt_snapshot_is_rebuilt(tmp_path: Path) -> None:
    emb = WordHashEmbedder()
    with Memory(tmp_path / "m", emb) as mem:
        mem.add_many([{"text": f"note {i}"} for i in range(50)])
    snap = next((tmp_path / "m" / "index").glob("snapshot-*"))
    rec = snap / "records.bin"
    rec.write_bytes(rec.read_bytes()[:-3])
    with pytest.warns(RuntimeWarning, match="rebuilding"), Memory(tmp_path / "m", emb) as mem:
        assert len(mem) == 50 and mem.search("note 3", k=1)[0].record.text == "note 3"
    import shutil

    shutil.rmtree(tmp_path / "m" / "index")
    with pytest.warns(RuntimeWarning, match="missing"), Memory(tmp_path / "m", emb) as mem:
        assert len(mem) == 50


def test_export_import_round_trip(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    with make_store("e", emb) as mem:
        mem.add("a pinned fact", evergreen=True, importance=0.9, metadata={"x": [1, "y"]})
        mem.add(
            "room message",
            table="messages",
            room_id="r",
            world_id="w",
            type="episodic",
            speaker="u",
        )
        mem.add("unique one", unique=True, session_id="s", namespace="n")
        mem.search("fact")
        mem.snapshot()
        original = {r.id: r for r in mem.list(limit=10, include_embedding=True)}
        assert mem.export_jsonl(make_store.tmp_path / "with.jsonl") == 3
        assert mem.export_jsonl(make_store.tmp_path / "without.jsonl", embeddings=False) == 3
    line = json.loads((make_store.tmp_path / "with.jsonl").read_text().splitlines()[0])
    assert set(line) == {
        *("id", "text", "table", "type", *SCOPE_FIELDS, "speaker", "importance", "evergreen"),
        "unique",
        *("metadata", "created_at", "updated_at", "last_accessed_at", "access_count"),
        *("valid_to", "expires_at", "recorded_at", "content_hash", "embedding"),
    }
    for name in ("with", "without"):
        with make_store(f"i-{name}", emb) as mem:
            assert mem.import_jsonl(make_store.tmp_path / f"{name}.jsonl") == 3
            assert mem.import_jsonl(make_store.tmp_path / f"{name}.jsonl", on_conflict="skip") == 0
            with pytest.raises(InvalidArgumentError):
                mem.import_jsonl(make_store.tmp_path / f"{name}.jsonl")
            got = {r.id: r for r in mem.list(limit=10, include_embedding=True)}
            assert got == original
            for rid, r in got.items():
                assert r.embedding is not None and original[rid].embedding is not None
                np.testing.assert_allclose(r.embedding, original[rid].embedding, rtol=1e-6)
            assert mem.search("pinned", k=1)[0].record.evergreen


def test_async_memory(make_store: StoreFactory) -> None:
    async def main() -> None:
        async with await AsyncMemory.open(make_store.location("a"), WordHashEmbedder()) as mem:
            await mem.add_many([{"text": f"async note {i}", "agent_id": "a"} for i in range(20)])
            rec = await mem.add("the odd one", agent_id="b")
            results = await asyncio.gather(
                *(mem.search("note", agent_id="a", k=3) for _ in range(8))
            )
            assert all(len(r) == 3 for r in results)
            assert (await mem.get(rec.id)).text == "the odd one"
            assert await mem.count(agent_id="a") == 20
            assert len(await mem.list(agent_id="b")) == 1
            await mem.delete(rec.id)
            assert len(mem) == 20

    asyncio.run(main())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(
        st.tuples(
            st.sampled_from(["red fox", "blue whale", "green tree", "red tree", "fox whale"]),
            st.sampled_from([None, "a1", "a2"]),
            st.sampled_from([None, "u1", "u2"]),
            st.sampled_from([None, "r1"]),
        ),
        min_size=1,
        max_size=25,
    ),
    query=st.sampled_from(["red", "whale", "tree fox", "green"]),
    scope=st.fixed_dictionaries(
        {},
        optional={
            "agent_id": st.sampled_from(["a1", "a2", "a3"]),
            "user_id": st.sampled_from(["u1", "u2"]),
            "room_id": st.sampled_from(["r1"]),
        },
    ),
    mode=st.sampled_from(["hybrid", "vector", "text"]),
)
def test_scopes_never_leak(
    records: list[tuple[str, str | None, str | None, str | None]],
    query: str,
    scope: dict[str, str],
    mode: str,
) -> None:
    with Memory(None, WordHashEmbedder(), dedup_window=0) as mem:
        mem.add_many(
            [{"text": t, "agent_id": a, "user_id": u, "room_id": r} for t, a, u, r in records]
        )
        inside = [
            i
            for i, (_, a, u, r) in enumerate(records)
            if all({"agent_id": a, "user_id": u, "room_id": r}[f] == v for f, v in scope.items())
        ]
        hits = mem.search(query, k=50, mode=mode, **scope)  # type: ignore[arg-type]
        for h in hits:
            for f, v in scope.items():
                assert getattr(h.record, f) == v
        assert len(mem.list(limit=100, **scope)) == len(inside)
        assert mem.count(**scope) == len(inside)
