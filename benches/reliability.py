"""Crash and fault loops: what survives a kill -9, a full disk and damaged files.

For each fault, ``--trials`` trials; each prints nothing until the end, then one
table (the README's "Reliability" table comes from it):

- **kill -9** of a process in the middle of ``add_many``, ``replace``, ``update``,
  ``delete``, ``import_jsonl``, ``ingest_text``, ``snapshot`` and ``close`` (each in a
  loop of its own, killed at a random instant), on SQLite and, with
  ``MEMLANE_PG_BIN`` set, on PostgreSQL (where the server is also restarted under
  a writer once per trial). The process prints each write it makes before the call
  (``BEGIN``) and what the store must hold after it returned (``ACK``); the one
  write in flight at the kill may or may not have happened.
- **disk full**: SQLite on a small tmpfs (skipped, with the reason, where the
  machine cannot mount one), written until it is full.
- **damaged files**: random bytes of a snapshot file or of ``memory.db`` flipped.

After each fault the store is reopened and checked: every acknowledged write is
there (a lost one counts), the index agrees with the database and finds a sample
of records by their text (a disagreement is a wrong answer), and any exception
that is not a ``MemlaneError`` counts as raw.

    python benches/reliability.py [--trials 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from conftest import WordHashEmbedder  # noqa: E402
from memlane import MemlaneError, Memory  # noqa: E402

OPS = ("add_many", "replace", "update", "delete", "import", "ingest", "snapshot", "close")

CHILD = textwrap.dedent(
    """
    import json, random, sys
    sys.path.insert(0, sys.argv[4])
    from conftest import WordHashEmbedder
    from memlane import Memory

    store, op, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    opts = {"snapshot_every": 25, "dedup_window": 0}
    if sys.argv[5]:
        opts["cache_dir"] = sys.argv[5]
    def say(*parts):
        print(*parts, flush=True)
    mem = Memory(store, WordHashEmbedder(), **opts)
    base = [r.id for r in mem.list(limit=10**6, table="base")]
    if not base:
        base = [r.id for r in mem.add_many(
            [{"text": f"base {seed} {i}", "table": "base", "id": f"b{seed}-{i}"} for i in range(60)]
        )]
    dump = sys.argv[6]
    say("READY")
    n = 0
    while True:
        n += 1
        tag = f"{seed}-{n}"
        if op == "add_many":
            ids = [f"a{tag}-{i}" for i in range(40)]
            say("BEGIN PRESENT", *ids)
            mem.add_many([{"text": f"note {tag} {i}", "id": ids[i]} for i in range(40)])
            say("ACK PRESENT", *ids)
        elif op == "replace":
            ids = [f"r{tag}-{i}" for i in range(20)]
            say("BEGIN SET", *ids)
            mem.replace([{"text": f"replaced {tag} {i}", "id": ids[i], "table": "set"}
                         for i in range(20)], "set")
            say("ACK SET", *ids)
        elif op == "update":
            target = rng.choice(base)
            say("BEGIN TEXT", target, f"v{tag}")
            mem.update(target, text=f"v{tag}")
            say("ACK TEXT", target, f"v{tag}")
        elif op == "delete":
            if not base:
                base = [r.id for r in mem.add_many(
                    [{"text": f"refill {tag} {i}", "table": "base", "id": f"f{tag}-{i}"}
                     for i in range(60)])]
                say("ACK PRESENT", *base)
            target = base.pop(rng.randrange(len(base)))
            say("BEGIN ABSENT", target)
            mem.delete(target)
            say("ACK ABSENT", target)
        elif op == "import":
            ids = [f"i{tag}-{i}" for i in range(30)]
            with open(dump, "w") as f:
                for i, rid in enumerate(ids):
                    f.write(json.dumps({"id": rid, "text": f"imported {tag} {i}"}) + "\\n")
            say("BEGIN PRESENT", *ids)
            mem.import_jsonl(dump)
            say("ACK PRESENT", *ids)
        elif op == "ingest":
            source = f"inline:doc{n % 3}"
            say("BEGIN DOC", source, f"version{tag}")
            mem.ingest_text("\\n\\n".join(f"version{tag} part {i} " + "words " * 40
                                          for i in range(6)), source=source, shared=True)
            say("ACK DOC", source, f"version{tag}")
        elif op == "snapshot":
            ids = [f"s{tag}-{i}" for i in range(10)]
            say("BEGIN PRESENT", *ids)
            mem.add_many([{"text": f"snap {tag} {i}", "id": ids[i]} for i in range(10)])
            say("ACK PRESENT", *ids)
            mem.snapshot()
        elif op == "close":
            ids = [f"c{tag}-{i}" for i in range(5)]
            say("BEGIN PRESENT", *ids)
            mem.add_many([{"text": f"closing {tag} {i}", "id": ids[i]} for i in range(5)])
            say("ACK PRESENT", *ids)
            mem.close()
            mem = Memory(store, WordHashEmbedder(), **opts)
    """
)


class Expected:
    """What the acknowledged writes say the store holds; the one in flight is uncertain."""

    def __init__(self) -> None:
        self.present: set[str] = set()
        self.absent: set[str] = set()
        self.texts: dict[str, str] = {}
        self.set: set[str] | None = None
        self.docs: dict[str, str] = {}
        self.in_flight: list[str] | None = None

    def apply(self, line: list[str]) -> None:
        if not line:
            return
        if line[0] == "BEGIN":
            self.in_flight = line[1:]
            return
        if line[0] != "ACK":
            return
        self.in_flight = None
        kind, *rest = line[1:]
        if kind == "PRESENT":
            self.present.update(rest)
            self.absent.difference_update(rest)
        elif kind == "ABSENT":
            self.absent.update(rest)
            self.present.difference_update(rest)
            self.texts.pop(rest[0], None)
        elif kind == "TEXT":
            self.texts[rest[0]] = rest[1]
        elif kind == "SET":
            self.set = set(rest)
        elif kind == "DOC":
            self.docs[rest[0]] = rest[1]


def _location(backend: str, work: Path, server: Any, name: str) -> tuple[str, str]:
    """The store location and the snapshot cache (PostgreSQL) for a trial."""
    if backend == "sqlite":
        return str(work / name), ""
    return server.url(schema=name.replace("-", "_")), str(work / f"cache-{name}")


def _check(store: str, cache: str, exp: Expected) -> tuple[int, int]:
    """(acknowledged writes lost, wrong answers) of the reopened store; then ``exp``
    adopts what the write in flight at the kill left, so the next round starts known."""
    lost = wrong = 0
    opts: dict[str, Any] = {"dedup_window": 0, "track_access": False}
    if cache:
        opts["cache_dir"] = cache
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a rebuilt snapshot warns; that is allowed
        mem = Memory(store, WordHashEmbedder(), **opts)
    with mem:
        records = {r.id: r for r in mem.list(limit=10**7)}
        flight = exp.in_flight or []
        uncertain = set(flight[1:]) if flight else set()
        missing = {i for i in exp.present - set(records) if i not in uncertain}
        back = {i for i in exp.absent & set(records) if i not in uncertain}
        lost += len(missing) + len(back)
        if os.environ.get("RELIABILITY_DEBUG") and (missing or back):
            in_db = [i for i in missing if i in mem]
            print(
                "lost:",
                sorted(missing)[:5],
                "back:",
                sorted(back)[:5],
                flight[:3],
                "missing but in the database:",
                in_db[:5],
                flush=True,
            )
        for rid, text in exp.texts.items():
            maybe = flight[2] if flight[:2] == ["TEXT", rid] else None
            if rid not in records or records[rid].text not in (text, maybe):
                lost += 1
        if exp.set is not None:
            got = {r for r, rec in records.items() if rec.table == "set"}
            maybe_set = set(flight[1:]) if flight[:1] == ["SET"] else None
            if got not in (exp.set, maybe_set):
                lost += 1
        docs = {str(d.metadata.get("source")): d.id for d in mem.list_documents(shared=True)}

        def version_of(source: str) -> str | None:
            if source not in docs:
                return None
            text = " ".join(f.text for f in mem.get_fragments(docs[source]))
            return next(iter(re.findall(r"version\S+", text)), None)

        for source, version in exp.docs.items():
            maybe = flight[2] if flight[:2] == ["DOC", source] else None
            if version_of(source) not in (version, maybe):
                lost += 1
        # The write in flight happened or not: from now on, what the store holds.
        kind = flight[0] if flight else None
        if kind == "PRESENT":
            exp.present.update(uncertain & set(records))
        elif kind == "ABSENT":
            exp.absent.update(uncertain - set(records))
            exp.present.difference_update(uncertain - set(records))
            exp.present.update(uncertain & set(records))
        elif kind == "TEXT" and flight[1] in records:
            exp.texts[flight[1]] = records[flight[1]].text
        elif kind == "SET":
            exp.set = {r for r, rec in records.items() if rec.table == "set"}
        elif kind == "DOC" and version_of(flight[1]) == flight[2]:
            exp.docs[flight[1]] = flight[2]
        exp.in_flight = None
        # The index agrees with the database and finds records by their text.
        if not len(mem) == mem.count() == len(records):
            wrong += 1
        sample = random.Random(len(records)).sample(sorted(records), min(20, len(records)))
        for rid in sample:
            hits = mem.search(records[rid].text, k=50, mode="text")
            if rid not in {h.record.id for h in hits}:
                wrong += 1
    return lost, wrong


def _wait_for_dead_sessions(server: Any, timeout: float = 60.0) -> None:
    """Waits until the server has ended every session of the killed process."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(server.url(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'reliability-child'"
            ).fetchone()
            if row is None or row[0] == 0:
                return
            time.sleep(0.05)
    raise RuntimeError("the killed writer's sessions did not end")


def kill_trial(
    backend: str, op: str, seed: int, work: Path, server: Any, restart: bool
) -> tuple[int, int, int]:
    store, cache = _location(backend, work, server, f"k-{op}-{seed}")
    script = work / "child.py"
    script.write_text(CHILD)
    exp = Expected()
    rng = random.Random(seed)
    raw = lost = wrong = 0
    for round_ in range(3):
        # The child's connections are named, so the check can wait for the server to
        # finish them: a COMMIT it received before the kill still completes after it.
        child_store = store
        if backend == "postgres":
            child_store += "&application_name=reliability-child"
        proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                child_store,
                op,
                str(seed * 10 + round_),
                str(TESTS),
                cache,
                str(work / f"dump-{op}-{seed}.jsonl"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "READY":
            raise RuntimeError(proc.communicate()[1])
        time.sleep(rng.uniform(0.2, 1.2))
        if restart and round_ == 1:
            server.restart()  # the writer meets a dead connection, then a new server
            time.sleep(rng.uniform(0.1, 0.5))
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        if proc.returncode != -signal.SIGKILL:
            # The writer stopped by itself: with a restarted server that is a
            # memlane error; anything else is raw.
            raw += "memlane.errors" not in err
        for line in out.splitlines(keepends=True):
            if line.endswith("\n"):  # a line cut by the kill was never acknowledged
                exp.apply(line.split())
        if backend == "postgres":
            _wait_for_dead_sessions(server)
        try:
            got = _check(store, cache, exp)
        except MemlaneError:
            got = (0, 1)
        except Exception:
            got, raw = (0, 1), raw + 1
        lost, wrong = lost + got[0], wrong + got[1]
    return lost, wrong, raw


def damaged_trial(kind: str, seed: int, work: Path) -> tuple[int, int, int]:
    """Flips bytes of a snapshot file (must be rebuilt) or of memory.db (must open
    consistent or raise a MemlaneError)."""
    rng = random.Random(seed)
    store = work / f"d-{kind}-{seed}"
    with Memory(store, WordHashEmbedder()) as mem:
        ids = {r.id for r in mem.add_many([{"text": f"fact {seed} {i}"} for i in range(300)])}
    if kind == "snapshot":
        files = sorted(p for p in (store / "index").rglob("*.bin"))
    else:
        files = [store / "memory.db"]
    target = rng.choice(files)
    data = bytearray(target.read_bytes())
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    target.write_bytes(bytes(data))
    exp = Expected()
    exp.present = ids if kind == "snapshot" else set()
    try:
        lost, wrong = _check(str(store), "", exp)
        return lost, wrong, 0
    except MemlaneError:
        return 0, 0, 0  # a damaged database reported as such
    except Exception:
        return 0, 0, 1


def disk_full_trial(seed: int, work: Path) -> tuple[int, int, int] | str:
    mount = work / f"tmpfs-{seed}"
    mount.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        return f"cannot mount a tmpfs here ({res.stderr.strip() or 'not permitted'})"
    try:
        store = mount / "store"
        exp = Expected()
        raw = 0
        try:
            with Memory(store, WordHashEmbedder(), dedup_window=0) as mem:
                n = 0
                while True:
                    n += 1
                    ids = [f"x{n}-{i}" for i in range(50)]
                    try:
                        mem.add_many([{"text": "filler " * 60 + rid, "id": rid} for rid in ids])
                    except MemlaneError:
                        break
                    exp.apply(["ACK", "PRESENT", *ids])
        except MemlaneError:
            pass  # close could not write its snapshot: the data is in the database
        except Exception:
            raw += 1
        # Space again: the store must hold every acknowledged write.
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        lost, wrong = _check(str(store), "", exp)
        return lost, wrong, raw
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ops", default=",".join(OPS))
    args = parser.parse_args()
    rows: dict[str, Counter[str]] = {}
    notes: dict[str, str] = {}
    server = None
    pg_bin = os.environ.get("MEMLANE_PG_BIN")
    backends = ["sqlite"]
    if pg_bin:
        from pg_server import PgServer

        server = PgServer(Path(pg_bin)).start()
        backends.append("postgres")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            for t in range(args.trials):
                seed = args.seed * 1000 + t
                for backend in backends:
                    for op in args.ops.split(","):
                        restart = backend == "postgres" and op == "add_many"
                        also = ", server restarted" if restart else ""
                        name = f"kill -9 during {op} ({backend}{also})"
                        lost, wrong, raw = kill_trial(backend, op, seed, work, server, restart)
                        rows.setdefault(name, Counter()).update(
                            trials=1, lost=lost, wrong=wrong, raw=raw
                        )
                for kind in ("snapshot", "database"):
                    lost, wrong, raw = damaged_trial(kind, seed, work)
                    rows.setdefault(f"damaged {kind} file", Counter()).update(
                        trials=1, lost=lost, wrong=wrong, raw=raw
                    )
                full = disk_full_trial(seed, work)
                if isinstance(full, str):
                    notes["disk full (tmpfs)"] = full
                else:
                    rows.setdefault("disk full (tmpfs)", Counter()).update(
                        trials=1, lost=full[0], wrong=full[1], raw=full[2]
                    )
        finally:
            if server is not None:
                server.stop()
            shutil.rmtree(work, ignore_errors=True)
    head = ("fault", "trials", "acknowledged writes lost", "wrong answers after recovery")
    print("| " + " | ".join((*head, "raw exceptions")) + " |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, c in rows.items():
        print(f"| {name} | {c['trials']} | {c['lost']} | {c['wrong']} | {c['raw']} |")
    for name, why in notes.items():
        print(f"| {name} | skipped: {why} | | | |")
    bad = sum(c["lost"] + c["wrong"] + c["raw"] for c in rows.values())
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
