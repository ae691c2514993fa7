"""Contact profiles with other writers about, on both backends: a profile is exactly its
scope's (an agent without ``agent_id`` or ``namespace`` never finds another's), a record
planted under its computable id is not it, and writers counting one contact at once (a
write landing between another's read and write, threads, two processes on PostgreSQL)
lose no count, alias or platform id and make one profile."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import InvalidArgumentError, Memory
from memlane.agent import CONTACTS, SessionScope, contact_profile, record_contact
from memlane.agent.profiles import _place

HELPER = SessionScope(agent_id="helper")
PLAIN = SessionScope()  # another agent of the store, set up without an agent_id
T0 = 1_800_000_000.0


def profiles(mem: Memory) -> list[Any]:
    return mem.list(CONTACTS, limit=100)


def other_writer(make_store: StoreFactory, mem: Memory, embedder: Any) -> Memory:
    """Another writer of store "p": on PostgreSQL another store object (another process's
    engine, with its own snapshot cache); an embedded store has one per process."""
    if make_store.backend != "postgres":
        return mem
    return make_store("p", embedder, cache_dir=make_store.tmp_path / "cache-other")


def test_a_profile_is_exactly_its_scopes(make_store: StoreFactory, word_embedder) -> None:
    with make_store("p", word_embedder) as mem:
        mine = record_contact(mem, HELPER, HELPER.resolve("telegram", 42, 7, name="Alice"), T0)
        other = record_contact(mem, PLAIN, PLAIN.resolve("telegram", 42, 9, name="Evil"), T0 + 1)
        assert other.id != mine.id and other.message_count == 1
        after = contact_profile(mem, HELPER.resolve("telegram", 42))
        assert after is not None and (after.aliases, after.message_count) == (("Alice",), 1)
        assert contact_profile(mem, PLAIN.resolve("telegram", 42)) == other
        # Tenants never share either.
        acme = SessionScope(namespace="acme")
        tenant = record_contact(mem, acme, acme.resolve("telegram", 42, name="Al"), T0)
        assert tenant.id not in {mine.id, other.id}
        again = record_contact(mem, PLAIN, PLAIN.resolve("telegram", 42, name="Mallory"), T0 + 2)
        assert again.id == other.id and again.aliases == ("Evil", "Mallory")
        got = contact_profile(mem, acme.resolve("telegram", 42))
        assert got is not None and got.aliases == ("Al",)
        assert len(profiles(mem)) == 3


def test_a_record_planted_under_the_profiles_id_is_not_the_profile(
    make_store: StoreFactory, word_embedder
) -> None:
    with make_store("p", word_embedder) as mem:
        event = HELPER.resolve("telegram", 42, 7, name="Alice")
        rid = _place(mem, event).id
        meta = {"contact": "telegram:42", "aliases": ["Mallory"], "platform_ids": {}}
        meta |= {"first_seen": 0.0, "last_seen": 0.0, "message_count": 99}
        mem.add("Contact telegram:42", id=rid, table=CONTACTS, type="profile", metadata=meta)
        assert contact_profile(mem, event) is None
        first = record_contact(mem, HELPER, event, T0)
        assert first.id != rid and (first.aliases, first.message_count) == (("Alice",), 1)
        second = record_contact(mem, HELPER, HELPER.resolve("telegram", 42, name="Ali"), T0 + 1)
        assert second.id == first.id and second.message_count == 2
        assert contact_profile(mem, event) == second
        assert mem.get(rid).metadata == meta and len(mem.history(rid)) == 1


def _between(mem: Memory, writes: tuple[str, ...], other: Any) -> None:
    """Runs ``other()`` once, just before the first of ``mem``'s ``writes`` methods called
    (a write of another writer landing between this one's read and its write)."""
    done = []
    for name in writes:
        real = getattr(mem, name)

        def write(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if not done:
                done.append(True)
                other()
            return _real(*args, **kwargs)

        setattr(mem, name, write)


@pytest.mark.parametrize("exists", [False, True], ids=["create", "merge"])
def test_a_write_between_a_read_and_a_write_is_merged_again(
    make_store: StoreFactory, word_embedder, exists: bool
) -> None:
    with make_store("p", word_embedder) as mem:
        # On PostgreSQL the other writer is another store object (another process's engine).
        other = other_writer(make_store, mem, word_embedder)
        if exists:
            record_contact(mem, HELPER, HELPER.resolve("telegram", 42, name="Alice"), T0)
        event = HELPER.resolve("telegram", 42, 7, name="Ally")
        theirs = HELPER.resolve("whatsapp", "+1555", 7, name="Bob")  # unlinked: its own
        racer = HELPER.resolve("telegram", 42, 8, name="Al")
        _between(
            mem,
            ("add", "update", "replace"),
            lambda: [record_contact(other, HELPER, e, T0 + 5) for e in (theirs, racer)],
        )
        got = record_contact(mem, HELPER, event, T0 + 9)
        assert got.message_count == 2 + exists
        assert set(got.aliases) == {"Al", "Ally"} | ({"Alice"} if exists else set())
        assert got.last_seen == T0 + 9
        mem._sync.follow()  # the index of what the other store wrote (PostgreSQL)
        assert [p.metadata["contact"] for p in profiles(mem)].count("telegram:42") == 1
        if other is not mem:
            other.close()


def test_a_profile_deleted_while_a_turn_merges_is_made_anew(
    make_store: StoreFactory, word_embedder
) -> None:
    with make_store("p", word_embedder) as mem:
        old = record_contact(mem, HELPER, HELPER.resolve("telegram", 42, name="Alice"), T0)
        _between(mem, ("update", "replace"), lambda: mem.delete(old.id))
        got = record_contact(mem, HELPER, HELPER.resolve("telegram", 42, name="Ally"), T0 + 1)
        # The deleted profile's aliases and counts do not come back.
        assert (got.aliases, got.message_count, got.first_seen) == (("Ally",), 1, T0 + 1)
        assert [p.id for p in profiles(mem)] == [got.id]


def test_threads_counting_one_contact(make_store: StoreFactory, word_embedder) -> None:
    runs = 12
    with make_store("p", word_embedder) as mem:
        stores = [mem, other_writer(make_store, mem, word_embedder)]
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def work(m: Memory, tag: str) -> None:
            try:
                start.wait()
                for i in range(runs):
                    event = HELPER.resolve("telegram", 42, 7, name=f"{tag}{i}")
                    record_contact(m, HELPER, event, T0 + i)
            except BaseException as e:  # reported below, in the test's thread
                errors.append(e)

        threads = [
            threading.Thread(target=work, args=(m, t)) for m, t in zip(stores, "AB", strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        mem._sync.follow()  # the index of what the other store wrote last (PostgreSQL)
        (rec,) = profiles(mem)
        assert rec.metadata["message_count"] == 2 * runs
        # Every name went through the alias list, which keeps the newest 20.
        assert len(rec.metadata["aliases"]) == 20
        assert {f"A{runs - 1}", f"B{runs - 1}"} <= set(rec.metadata["aliases"])
        if stores[1] is not mem:
            stores[1].close()


_WRITER = """
import json, sys, time
from pathlib import Path
from memlane import Memory
from memlane.agent import SessionScope, record_contact
cache, tag, url, runs, go = sys.argv[1:6]
mem = Memory(url, None, cache_dir=cache)
scopes = SessionScope(agent_id="helper")
print("READY", flush=True)
while not Path(go).exists():
    time.sleep(0.002)
for i in range(int(runs)):
    record_contact(mem, scopes, scopes.resolve("telegram", 42, 7, name=f"{tag}{i}"), 1e9 + i)
mem.close()
print(json.dumps("ok"), flush=True)
"""


def test_two_processes_counting_one_contact_on_postgres(pg_server: Any, tmp_path: Path) -> None:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    runs = 15
    try:
        mem = factory("procs")
        url, go = str(factory.location("procs")), tmp_path / "go"
        args = [url, str(runs), str(go)]
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(tmp_path / f"c{w}"), "AB"[w], *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for w in range(2)
        ]
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "READY", child.stderr
        go.touch()
        for child in children:
            out, err = child.communicate(timeout=300)
            assert child.returncode == 0, err
            assert json.loads(out.strip().splitlines()[-1]) == "ok"
        mem._sync.follow()
        (rec,) = mem.list(CONTACTS, limit=10)
        assert rec.metadata["message_count"] == 2 * runs
        assert {f"A{runs - 1}", f"B{runs - 1}"} <= set(rec.metadata["aliases"])
    finally:
        factory.close_all()


def test_a_profile_kept_before_versions_is_rewritten_in_place(
    make_store: StoreFactory, word_embedder
) -> None:
    with make_store("p", word_embedder) as mem:
        event = HELPER.resolve("telegram", 42, 7, name="Ally")
        meta = {
            "contact": "telegram:42",
            "aliases": ["Alice"],
            "platform_ids": {"telegram": ["42"]},
        }
        meta |= {"first_seen": T0, "last_seen": T0, "message_count": 3}
        old = mem.add(
            "Contact telegram:42", table=CONTACTS, type="profile", metadata=meta, **event.fields
        )
        got = record_contact(mem, HELPER, event, T0 + 1)
        assert got.id == old.id and got.message_count == 4 and got.aliases == ("Alice", "Ally")
        assert len(profiles(mem)) == 1


def test_bad_arguments_store_nothing(word_embedder) -> None:
    with Memory(None, word_embedder) as mem:
        event = HELPER.resolve("telegram", 42, 7)
        for kwargs, name in [
            ({"count": 0}, "count"),
            ({"count": "2"}, "count"),
            ({"names": "Alice"}, "names"),
            ({"names": [""]}, "names"),
            ({"names": [3]}, "names"),
        ]:
            with pytest.raises(InvalidArgumentError, match=name):
                record_contact(mem, HELPER, event, T0, **kwargs)
        with pytest.raises(InvalidArgumentError, match="now"):
            record_contact(mem, HELPER, event, "today")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="EventScope"):
            contact_profile(mem, {"user_id": "x"})  # type: ignore[arg-type]
        assert mem.count() == 0
