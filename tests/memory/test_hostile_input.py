"""Hostile input through every public entry point (issue 14): vectors without a unit
length, lone surrogates, NUL characters, huge strings and integers, deep nesting.

What must hold: only :class:`~memlane.errors.MemlaneError` subclasses escape (the tool
dispatcher answers with an error naming the problem, never ``internal_error``), and a
refused write stores nothing.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import StoreFactory, WordHashEmbedder
from memlane import HnswIndex, Memory
from memlane.agent.core_memory import CoreMemory
from memlane.agent.memory_tools import MemoryTools
from memlane.errors import InvalidArgumentError, MemlaneError, StorageError
from memlane.notes import Notebook

DIM = 32

# -- vectors that are finite and non-zero but have no unit length in float32 --------------

NO_UNIT_LENGTH = {
    "tiny": 1e-45,  # the norm underflows: 1 / norm is infinite
    "huge": 1e38,  # the norm overflows
}


@pytest.mark.parametrize("value", NO_UNIT_LENGTH.values(), ids=NO_UNIT_LENGTH.keys())
def test_a_vector_without_unit_length_is_refused_and_stores_nothing(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, value: float
) -> None:
    mem = make_store("s", word_embedder)
    kept = mem.add("kept record", id="kept")
    bad = np.full(DIM, value, dtype=np.float32)
    with pytest.raises(InvalidArgumentError, match="norm"):
        mem.add("poison", embedding=bad)
    with pytest.raises(InvalidArgumentError, match="norm"):
        mem.add_many([{"text": "fine"}, {"text": "poison", "embedding": bad}])
    with pytest.raises(InvalidArgumentError, match="norm"):
        mem.update("kept", text="changed", embedding=bad)
    with pytest.raises(InvalidArgumentError, match="norm"):
        mem.replace([{"text": "poison", "embedding": bad}])
    with pytest.raises(InvalidArgumentError, match="norm"):
        mem.search("kept", query_embedding=bad)
    # The store still works: nothing was committed that the engine cannot link.
    mem.add("after", id="after")
    mem.wait_indexed()
    assert len(mem) == mem.count() == 2
    assert mem.get("kept").text == kept.text
    mem.close()
    mem = make_store("s", word_embedder)
    try:
        assert len(mem) == mem.count() == 2
        mem.add("after the reopen")
        mem.wait_indexed()
        assert [h.record.id for h in mem.search("kept record", 1)] == ["kept"]
    finally:
        mem.close()


@pytest.mark.parametrize("value", NO_UNIT_LENGTH.values(), ids=NO_UNIT_LENGTH.keys())
def test_hnsw_index_refuses_a_vector_without_unit_length(value: float) -> None:
    index = HnswIndex(DIM)
    bad = np.full((1, DIM), value, dtype=np.float32)
    with pytest.raises(InvalidArgumentError, match="norm"):
        index.add(np.array([1], dtype=np.uint64), bad)
    with pytest.raises(InvalidArgumentError, match="norm"):
        index.search(bad, 1)
    assert len(index) == 0
    # Stored as given (l2): a norm whose squared distances overflow float32.
    l2 = HnswIndex(DIM, metric="l2")
    with pytest.raises(InvalidArgumentError, match="norm"):
        l2.add(np.array([1], dtype=np.uint64), np.full((1, DIM), 1e38, dtype=np.float32))


# -- hostile values -----------------------------------------------------------------------

BAD_CHARS = ["\ud800", "\udfff", "\udc80", "\x00"]


def _nested(depth: int, kind: str) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


#: Text both databases cannot store: a lone surrogate or a NUL somewhere in it.
unstorable_text = st.builds(
    lambda a, c, b: a + c + b,
    st.text(max_size=8),
    st.sampled_from(BAD_CHARS),
    st.text(max_size=8),
)
hostile_text = st.one_of(
    unstorable_text,
    st.text(min_size=1, max_size=20),
    st.sampled_from(["", "   ", "word " * 40_000]),
)
hostile_int = st.sampled_from([2**63, 2**64, 10**100, -1, -(2**64), 0, 2**62])
hostile_metadata = st.one_of(
    st.builds(lambda s: {s: 1}, hostile_text),
    st.builds(lambda s: {"k": s}, hostile_text),
    st.builds(
        lambda d, kind: {"k": _nested(d, kind)},
        st.sampled_from([17, 100, 2_000]),
        st.sampled_from(["list", "dict"]),
    ),
    st.builds(lambda n: {"k": n}, hostile_int),
)


def _unstorable(value: Any) -> bool:
    return isinstance(value, str) and any(c in value for c in BAD_CHARS)


# Each case: (name, kind of value, whether it writes, call). A write case marked
# ``stores`` puts the value in a stored field, so an unstorable value must be refused.
Call = Callable[[Memory, Any], Any]
CASES: list[tuple[str, str, bool, bool, Call]] = [
    ("add text", "text", True, True, lambda m, v: m.add(v)),
    ("add table", "text", True, True, lambda m, v: m.add("x", table=v)),
    ("add type", "text", True, True, lambda m, v: m.add("x", type=v)),
    ("add agent_id", "text", True, True, lambda m, v: m.add("x", agent_id=v)),
    ("add namespace", "text", True, True, lambda m, v: m.add("x", namespace=v)),
    ("add id", "text", True, True, lambda m, v: m.add("x", id=v)),
    ("add metadata", "meta", True, False, lambda m, v: m.add("x", metadata=v)),
    (
        "add_many",
        "text",
        True,
        True,
        lambda m, v: m.add_many([{"text": "fine"}, {"text": "y", "user_id": v}]),
    ),
    ("update text", "text", True, True, lambda m, v: m.update("seed", text=v)),
    ("update type", "text", True, True, lambda m, v: m.update("seed", type=v)),
    ("update metadata", "meta", True, False, lambda m, v: m.update("seed", metadata=v)),
    ("replace items", "text", True, True, lambda m, v: m.replace([{"text": v}], "other")),
    ("replace table", "text", True, False, lambda m, v: m.replace([{"text": "x"}], v)),
    ("replace filters", "meta", True, False, lambda m, v: m.replace([], "other", filters=v)),
    ("search query", "text", False, False, lambda m, v: m.search(v)),
    ("search text query", "text", False, False, lambda m, v: m.search(v, mode="text")),
    ("search k", "int", False, False, lambda m, v: m.search("x", v)),
    ("search candidates", "int", False, False, lambda m, v: m.search("x", candidates=v)),
    ("search table", "text", False, False, lambda m, v: m.search("x", table=v)),
    ("search scope", "text", False, False, lambda m, v: m.search("x", room_id=v)),
    ("search filters", "meta", False, False, lambda m, v: m.search("x", filters=v)),
    ("list limit", "int", False, False, lambda m, v: m.list(limit=v)),
    ("list offset", "int", False, False, lambda m, v: m.list(offset=v)),
    ("list table", "text", False, False, lambda m, v: m.list(v)),
    ("list sort", "text", False, False, lambda m, v: m.list(sort=v)),
    ("scopes scope", "text", False, False, lambda m, v: m.scopes(user_id=v)),
    ("scopes filters", "meta", False, False, lambda m, v: m.scopes(filters=v)),
    ("count scope", "text", False, False, lambda m, v: m.count(session_id=v)),
    ("count filters", "meta", False, False, lambda m, v: m.count(filters=v)),
    ("get", "text", False, False, lambda m, v: m.get(v)),
    ("delete", "text", True, False, lambda m, v: m.delete(v)),
    ("delete_all table", "text", True, False, lambda m, v: m.delete_all(v)),
    ("delete_all filters", "meta", True, False, lambda m, v: m.delete_all(filters=v)),
    ("prune scope", "text", True, False, lambda m, v: m.prune(max_age_days=1e9, agent_id=v)),
    ("prune count", "int", True, False, lambda m, v: m.prune(keep_access_count_above=v)),
    ("prune age", "int", True, False, lambda m, v: m.prune(max_age_days=v)),
    (
        "ingest_text text",
        "text",
        True,
        False,
        lambda m, v: m.ingest_text(v, source="doc", shared=True),
    ),
    (
        "ingest_text source",
        "text",
        True,
        True,
        lambda m, v: m.ingest_text("a text", source=v, shared=True),
    ),
    (
        "ingest_text metadata",
        "meta",
        True,
        False,
        lambda m, v: m.ingest_text("a text", source="doc", shared=True, metadata=v),
    ),
    ("search_knowledge query", "text", False, False, lambda m, v: m.search_knowledge(v)),
    (
        "search_knowledge agent",
        "text",
        False,
        False,
        lambda m, v: m.search_knowledge("x", agent_id=v),
    ),
    ("search_knowledge k", "int", False, False, lambda m, v: m.search_knowledge("x", k=v)),
    (
        "search_knowledge filters",
        "meta",
        False,
        False,
        lambda m, v: m.search_knowledge("x", filters=v),
    ),
    ("search_documents mode", "text", False, False, lambda m, v: m.search_documents("x", mode=v)),
    (
        "search_documents filters",
        "meta",
        False,
        False,
        lambda m, v: m.search_documents("x", filters=v),
    ),
    ("get_fragments", "text", False, False, lambda m, v: m.get_fragments(v)),
    ("search mode", "text", False, False, lambda m, v: m.search("x", mode=v)),
    ("search fusion", "text", False, False, lambda m, v: m.search("x", fusion=v)),
    ("list order", "text", False, False, lambda m, v: m.list(order=v)),
    ("add_many items", "meta", True, False, lambda m, v: m.add_many(v)),
    ("replace items", "meta", True, False, lambda m, v: m.replace(v, "other")),
]
#: A value of another type than the argument takes: a number, a container, bytes, or
#: a dict or list nested deeper than Python's repr recurses (an error message that
#: shows it must not raise ``RecursionError``).
WRONG_TYPES: list[Any] = [5, 2.5, None, True, b"bytes", ["x"], ("x",), {"k": "v"}, object()]
WRONG_TYPES += [_nested(3_000, kind) for kind in ("dict", "list")]
wrong_type = st.sampled_from(WRONG_TYPES)
VALUES = {
    kind: st.one_of(values, wrong_type)
    for kind, values in {"text": hostile_text, "int": hostile_int, "meta": hostile_metadata}.items()
}

case_and_value = st.sampled_from(CASES).flatmap(
    lambda case: st.tuples(st.just(case), VALUES[case[1]])
)

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _state(mem: Memory) -> tuple[int, int, list[tuple[str, str]]]:
    records = mem.list(None, limit=1_000)
    return len(mem), mem.count(), sorted((r.id, r.text) for r in records)


def _seeded(make_store: StoreFactory) -> Memory:
    mem = make_store("s", WordHashEmbedder(DIM))
    mem.add("the seed record", id="seed")
    mem.ingest_text("a shared document", source="seed-doc", shared=True)
    return mem


@pytest.fixture
def seeded(make_store: StoreFactory) -> Iterator[Memory]:
    """One store per test function: hypothesis runs every example against it."""
    mem = _seeded(make_store)
    yield mem
    mem.close()


def _check(mem: Memory, case: tuple[str, str, bool, bool, Call], value: Any) -> None:
    """Runs one case: only a memlane error may escape, and a refused write stores nothing."""
    name, _, writes, stores, call = case
    before = _state(mem) if writes else None
    try:
        call(mem, value)
    except MemlaneError:
        if before is not None:
            assert _state(mem) == before, f"{name}: a refused write changed the store"
    except Exception as e:  # pragma: no cover - what this test exists to catch
        pytest.fail(f"{name}({reprlib.repr(value)}) raised {type(e).__name__}: {e}")
    else:
        assert not (stores and _unstorable(value)), f"{name} stored {value!r}"
        if "seed" not in mem:
            # A delete that went through: put the seed back for the next example.
            mem.add("the seed record", id="seed")


@SETTINGS
@given(case_and_value)
def test_only_memlane_errors_escape_and_refused_writes_store_nothing(
    seeded: Memory, data: tuple[tuple[str, str, bool, bool, Call], Any]
) -> None:
    _check(seeded, *data)


#: The worst of each kind, tried on every case (the random examples above may miss one).
WORST: dict[str, list[Any]] = {
    "text": ["\ud800", "a\x00b", "", "word " * 40_000],
    "int": [2**64, 10**400, -1],
    "meta": [
        {"\ud800": 1},
        {"k": "\udfff"},
        {"k": _nested(2_000, "list")},
        {"k": _nested(2_000, "dict")},
        {"k": _nested(17, "list")},
        {"k": 10**400},
    ],
}


def test_every_entry_point_takes_the_worst_values(seeded: Memory) -> None:
    for case in CASES:
        for value in WORST[case[1]]:
            _check(seeded, case, value)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda m: m.add("te\ud800xt"), "text"),
        (lambda m: m.add("x", id="a\x00b"), "id"),
        (lambda m: m.add("x", agent_id="\udfff"), "agent_id"),
        (lambda m: m.add("x", table="t\x00"), "table"),
        (lambda m: m.add("x", metadata={"k\ud800": 1}), "metadata"),
        (lambda m: m.add("x", metadata={"k": _nested(2_000, "list")}), "metadata"),
        (lambda m: m.add("x", metadata={"k": _nested(17, "list")}), "metadata"),
        (lambda m: m.add("x", metadata={"k": _nested(2_000, "dict")}), "metadata"),
        (lambda m: m.update("seed", text="\ud800"), "text"),
        (lambda m: m.search("q\ud800"), "query"),
        (lambda m: m.search("q", 2**64), "k"),
        (lambda m: m.search("q", candidates=2**64), "candidates"),
        (lambda m: m.search("q", filters={"k": "\ud800"}), "filter"),
        (lambda m: m.search("q", mode="text", query_embedding="abc"), "query_embedding"),
        (lambda m: m.search("q", mode="text", query_embedding=[[1.0]]), "query_embedding"),
        (lambda m: m.list(limit=2**64), "limit"),
        (lambda m: m.list(offset=2**64), "offset"),
        (lambda m: m.list(sort="\ud800"), "sort"),
        (lambda m: m.get("\ud800"), "id"),
        (lambda m: m.delete("a\x00"), "id"),
        (lambda m: m.prune(keep_access_count_above=10**400), "keep_access_count_above"),
        (lambda m: m.ingest_text("\ud800", source="s", shared=True), "text"),
        (
            lambda m: m.ingest_text("x", source="s", shared=True, metadata=_nested(2_000, "dict")),
            "metadata",
        ),
    ],
)
def test_hostile_input_is_refused_naming_the_argument(
    make_store: StoreFactory, call: Callable[[Memory], Any], named: str
) -> None:
    mem = _seeded(make_store)
    try:
        before = _state(mem)
        with pytest.raises(InvalidArgumentError, match=named):
            call(mem)
        assert _state(mem) == before
    finally:
        mem.close()


def test_metadata_nested_within_the_limit_is_kept(tmp_path: Any) -> None:
    with Memory(tmp_path / "s", None) as mem:
        meta = {"l": _nested(16, "list"), "d": _nested(16, "dict")}
        assert mem.get(mem.add("x", metadata=meta).id).metadata == json.loads(json.dumps(meta))


# -- the tool dispatcher --------------------------------------------------------------------

tool_call = st.one_of(
    st.builds(lambda v: ("remember", {"content": v}), hostile_text),
    st.builds(lambda v: ("remember", {"content": "x", "metadata": v}), hostile_metadata),
    st.builds(lambda v: ("recall", {"query": v}), hostile_text),
    st.builds(lambda v: ("recall", {"query": "x", "limit": v}), hostile_int),
    st.builds(lambda v: ("forget", {"id": v}), hostile_text),
    st.builds(lambda v: ("search_knowledge", {"query": v}), hostile_text),
    st.builds(lambda v: ("search_knowledge", {"query": "x", "limit": v}), hostile_int),
    # As a model sends them: JSON text, escapes decoding to lone surrogates, deep arrays.
    st.builds(lambda v: ("remember", json.dumps({"content": v})), hostile_text),
    st.builds(
        lambda d: ("remember", '{"content": "x", "metadata": {"k": ' + "[" * d + "]" * d + "}}"),
        st.sampled_from([17, 5_000, 100_000]),
    ),
)


@SETTINGS
@given(tool_call)
def test_the_tool_dispatcher_answers_hostile_calls_with_errors_naming_the_problem(
    seeded: Memory, call: tuple[str, Any]
) -> None:
    tools = MemoryTools(seeded)
    before = _state(tools.memory)
    name, args = call
    result = tools.handle_tool_call(name, args)
    assert isinstance(result, dict)
    if not result["ok"]:
        assert result["error"]["type"] != "internal_error", result
        assert result["error"]["message"]
        if name == "remember":
            assert _state(tools.memory) == before
    content = args.get("content") if isinstance(args, dict) else None
    if isinstance(args, str) and '"content": "x"' not in args:
        content = json.loads(args)["content"]
    if name == "remember" and _unstorable(content):
        assert result["error"]["type"] == "invalid_arguments", result


def test_membership_of_an_id_no_database_can_store_is_false(seeded: Memory) -> None:
    assert "seed" in seeded
    for bad in ("\ud800", "a\x00b", "", 7):
        assert bad not in seeded


def test_every_entry_point_refuses_a_value_of_the_wrong_type(seeded: Memory) -> None:
    # Each case with each wrong type once, beside the sample the test above draws.
    for case in CASES:
        for value in WRONG_TYPES:
            _check(seeded, case, value)


class _EqualsAll(str):
    """A str whose hash is another text's and which equals anything."""

    def __new__(cls, value: str, posing_as: str) -> _EqualsAll:
        made = super().__new__(cls, value)
        made.posing_as = posing_as  # type: ignore[attr-defined]
        return made

    def __hash__(self) -> int:
        return hash(self.posing_as)  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        return True


@pytest.mark.parametrize("bad", ["", "a\x00b", "x\ud800y"])
def test_a_str_subclass_cannot_vouch_for_a_later_value(bad: str) -> None:
    # The check of repeated tables, types and scope values remembers the texts that
    # passed: a subclass equal to everything was remembered as itself, and a later
    # empty, NUL or lone-surrogate value of the same hash passed as checked.
    with Memory(None, WordHashEmbedder(), dedup_window=0) as mem:
        fields = ("table", "type", "speaker", "agent_id")
        mem.add_many([{"text": "harmless", **{f: _EqualsAll("ok", bad) for f in fields}}])
        for field in fields:
            with pytest.raises(InvalidArgumentError, match=field):
                mem.add_many([{"text": "second", field: bad}])
        assert mem.count() == 1


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda m, p: Memory(p / "x", WordHashEmbedder(), language=5), "language must be a str"),
        (lambda m, p: Memory(p / "x", WordHashEmbedder(), language="\ud800"), "language"),
        (lambda m, p: Memory(p / "x", WordHashEmbedder(), default_scope=5), "default_scope"),
        (lambda m, p: Memory(p / "x", WordHashEmbedder(), default_scope="a"), "default_scope"),
        (lambda m, p: Memory(str(p / "a\ud800"), WordHashEmbedder()), "path holds"),
        (lambda m, p: Memory(p / "x", WordHashEmbedder(), weights={1: 1.0, "x": 1.0}), "weight"),
        (lambda m, p: m.search("x", weights={1: 1.0, "x": 1.0}), "unknown weight"),
        (
            lambda m, p: Memory(p / "x", WordHashEmbedder(), hnsw_precision=np.array([1, 2])),
            "hnsw_precision",
        ),
        (lambda m, p: m.export_jsonl(str(p / "a\ud800.jsonl")), "path holds"),
        (lambda m, p: m.import_jsonl(str(p / "a\ud800.jsonl")), "path holds"),
        (lambda m, p: m.ingest(str(p / "a\ud800"), shared=True), "path holds"),
        (lambda m, p: m.export_notes("\x00"), "NUL"),
        (lambda m, p: m.export_notes(""), "dir must be a path"),
        (lambda m, p: m.get("a", include_embedding=np.array([1, 2])), "include_embedding"),
        (lambda m, p: m.list(include_embedding=np.array([1, 2])), "include_embedding"),
        (lambda m, p: m.search("x", include_embedding=np.array([1, 2])), "include_embedding"),
        (lambda m, p: m.add("x", metadata=np.array([1, 2])), "metadata must be a dict"),
        (lambda m, p: m.add("x", metadata=0), "metadata must be a dict, got int"),
        (lambda m, p: m.list(limit=[10**5000]), "limit must be an int"),
        (
            lambda m, p: m.ingest_text(
                "t", source="s", shared=True, file_type=_nested(5000, "dict")
            ),
            "file_type",
        ),
        (lambda m, p: Notebook(m, {"agent_id": "a"}).append(np.array([1, 2]), "x"), "notes file"),
        (lambda m, p: m.renew(np.array("abc")), "ids must be a list"),
        (lambda m, p: m.add_many(np.array("abc")), "add_many takes a list"),
        (lambda m, p: m.ingest(p, shared=True, root="x" * 5000), "root must be a folder"),
        (lambda m, p: CoreMemory(m, {"agent_id": "a"}, table=frozenset({"t"})), "table must be"),
        (lambda m, p: m.expire(table=b"memories"), "table must be a str"),
        (lambda m, p: m.expire(table=" "), "table must not be empty"),
    ],
)
def test_arguments_no_check_named_before_are_refused(
    make_store: StoreFactory, tmp_path: Any, call: Callable[[Memory, Any], Any], named: str
) -> None:
    # Each raised a raw TypeError, ValueError or UnicodeEncodeError before.
    mem = _seeded(make_store)
    try:
        before = _state(mem)
        with pytest.raises(InvalidArgumentError, match=named):
            call(mem, tmp_path)
        assert _state(mem) == before
    finally:
        mem.close()


@pytest.mark.parametrize("call", ["import_notes", "export_notes"])
def test_a_notes_folder_name_the_system_refuses_is_a_storage_error(
    make_store: StoreFactory, call: str
) -> None:
    mem = _seeded(make_store)
    try:
        with pytest.raises(StorageError, match=r"x{20}"):
            getattr(mem, call)("x" * 5000)
    finally:
        mem.close()
