"""Crash and fault loops: what survives a kill -9, a full disk and damaged files.

For each fault, ``--trials`` trials; each prints nothing until the end, then one
table (docs/reliability.md's "Faults, measured" table comes from it):

- **kill -9** of a process in the middle of ``add_many``, ``replace``, ``update``,
  ``delete``, ``supersede``, ``import_jsonl``, ``ingest_text``, ``snapshot`` and
  ``close`` (each in a loop of its own, killed at a random instant), on SQLite and,
  with ``MEMLANE_PG_BIN`` set, on PostgreSQL (where the server is also restarted
  under a writer once per trial). The process prints each write it makes before the
  call (``BEGIN``) and what the store must hold after it returned (``ACK``); the one
  write in flight at the kill may or may not have happened, all or nothing.
- **disk full**: SQLite on a small tmpfs (skipped, with the reason, where the
  machine cannot mount one), written until it is full.
- **damaged files**: random bytes of a snapshot file, of ``memory.db`` or of the vector
  file beside it (``vectors.log``) flipped.

After each fault the store is reopened and checked: every acknowledged write is
there (a lost one counts), each fact superseded has exactly one current version, the
index agrees with the database and finds a sample of records by their text, leaving
superseded versions out of a search (a disagreement is a wrong answer, and a store
with any is "reopened inconsistent"), and any exception that is not a
``MemlaneError`` counts as raw. A trial with a loss or a wrong answer is named, with
its seed, on stderr (``RELIABILITY_DEBUG=1`` adds the ids).

    python benches/reliability.py [--trials 10] [--seed 0] [--ops delete,supersede]
        [--faults kill,damaged,disk] [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from conftest import WordHashEmbedder  # noqa: E402
from memlane import MemlaneError, Memory  # noqa: E402

OPS = (
    "add_many",
    "replace",
    "update",
    "delete",
    "supersede",
    "import",
    "ingest",
    "snapshot",
    "close",
)
FAULTS = ("kill", "damaged", "disk")

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
    if op == "supersede":
        # Each fact keeps exactly one current version, whatever is superseded.
        current = [r.id for r in mem.list(limit=10**6, table="base",
                                          filters={"valid_to": None})]
        say("ACK FACTS", 60)
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
        elif op == "supersede":
            i = rng.randrange(len(current))
            old, text = current[i], f"v{tag}"
            say("BEGIN SUPERSEDE", old, text)
            current[i] = mem.supersede(old, text).id
            say("ACK SUPERSEDE", old, text, current[i])
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
        # supersede: versions that must be closed, versions that must be current, and
        # how many facts the table "base" holds (each with exactly one current version).
        self.closed: set[str] = set()
        self.current: set[str] = set()
        self.facts: int | None = None
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
        elif kind == "SUPERSEDE":
            self.supersede(*rest)
        elif kind == "FACTS":
            self.facts = int(rest[0])

    def supersede(self, old: str, text: str, new: str) -> None:
        self.closed.add(old)
        self.current.discard(old)
        self.current.add(new)
        self.texts[new] = text


def _location(backend: str, work: Path, server: Any, name: str) -> tuple[str, str]:
    """The store location and the snapshot cache (PostgreSQL) for a trial."""
    if backend == "sqlite":
        return str(work / name), ""
    return server.url(schema=name.replace("-", "_")), str(work / f"cache-{name}")


def _debug(*parts: Any) -> None:
    if os.environ.get("RELIABILITY_DEBUG"):
        print(*parts, file=sys.stderr, flush=True)


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
        if missing or back:
            _debug(
                "lost:",
                sorted(missing)[:5],
                "back:",
                sorted(back)[:5],
                flight[:3],
                "missing but in the database:",
                [i for i in missing if i in mem][:5],
            )
        for rid, text in exp.texts.items():
            maybe = flight[2] if flight[:2] == ["TEXT", rid] else None
            if rid not in records or records[rid].text not in (text, maybe):
                lost += 1
                _debug("text lost:", rid, text, records[rid].text if rid in records else None)
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
        # supersede: an acknowledged one closed its record and its successor is current
        # (unless the one in flight superseded it in turn).
        reopened = [i for i in exp.closed if i not in records or records[i].current]
        target = flight[1] if flight[:1] == ["SUPERSEDE"] else None
        # (A missing successor already counted among the texts.)
        ended = [i for i in exp.current - {target} if i in records and not records[i].current]
        lost += len(reopened) + len(ended)
        if reopened or ended:
            _debug("superseded but current:", sorted(reopened)[:5], "ended:", sorted(ended)[:5])
        successors: list[str] = []
        if target is not None:
            # All or nothing: the record closed if and only if its one successor exists.
            successors = [r for r, rec in records.items() if rec.text == flight[2]]
            done = target in records and not records[target].current
            if len(successors) != (1 if done else 0):
                wrong += 1
                successors = []  # nothing to adopt
                _debug("supersede half done:", target, "closed:", done, "successors:", successors)
        if exp.facts is not None:
            now = [r for r, rec in records.items() if rec.table == "base" and rec.current]
            if len(now) != exp.facts:  # a fork (two current versions) or a fact gone
                wrong += 1
                _debug("current versions:", len(now), "facts:", exp.facts)
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
        elif kind == "SUPERSEDE" and len(successors) == 1:
            exp.supersede(flight[1], flight[2], successors[0])
        exp.in_flight = None
        # The index agrees with the database and finds records by their text; a search
        # leaves superseded versions out.
        if not len(mem) == mem.count() == len(records):
            wrong += 1
            _debug("counts:", len(mem), mem.count(), len(records))
        sample = random.Random(len(records)).sample(sorted(records), min(20, len(records)))
        for rid in sample:
            text = records[rid].text
            every = {
                h.record.id for h in mem.search(text, k=50, mode="text", include_superseded=True)
            }
            found = {h.record.id for h in mem.search(text, k=50, mode="text")}
            if rid not in every or (rid in found) != records[rid].current:
                wrong += 1
                _debug("search:", rid, repr(text), rid in every, rid in found)
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


class ChildOutput:
    """Everything a child process writes, each stream read by one thread of its own
    from start to end of file: READY is just the first line of stdout, and no line
    waits in a buffer that a second reader of the same pipe would skip."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._changed = threading.Condition()
        self._eof = False
        self._threads = [
            threading.Thread(target=self._read_stdout, args=(proc.stdout,), daemon=True),
            threading.Thread(target=self.errors.extend, args=(proc.stderr,), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_stdout(self, stream: Any) -> None:
        try:
            for line in stream:  # the last line, cut by the kill, comes without its "\n"
                with self._changed:
                    self.lines.append(line)
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._eof = True
                self._changed.notify_all()

    def wait_ready(self, timeout: float) -> bool:
        """True once a line is READY; False if stdout ended without one."""
        with self._changed:
            self._changed.wait_for(lambda: "READY\n" in self.lines or self._eof, timeout)
            return "READY\n" in self.lines

    def finish(self, timeout: float) -> tuple[list[str], str]:
        """Waits for the process and both streams to end: (stdout lines, stderr)."""
        self.proc.wait(timeout)
        for t in self._threads:
            t.join(timeout)
            if t.is_alive():
                raise RuntimeError("the child's output did not end")
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return self.lines, "".join(self.errors)


def kill_trial(
    backend: str, op: str, seed: int, work: Path, server: Any, restart: bool
) -> Counter[str]:
    """Three rounds of: a writer looping over ``op``, killed at a random instant,
    then the store reopened and checked. Counts lost, wrong, raw and ``inconsistent``
    (rounds whose reopened store gave a wrong answer)."""
    store, cache = _location(backend, work, server, f"k-{op}-{seed}")
    script = work / "child.py"
    script.write_text(CHILD)
    exp = Expected()
    rng = random.Random(seed)
    got: Counter[str] = Counter()
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
        child = ChildOutput(proc)
        try:
            if not child.wait_ready(timeout=300):
                proc.kill()
                raise RuntimeError(child.finish(timeout=120)[1] or "the writer did not start")
            time.sleep(rng.uniform(0.2, 1.2))
            if restart and round_ == 1:
                server.restart()  # the writer meets a dead connection, then a new server
                time.sleep(rng.uniform(0.1, 0.5))
            os.kill(proc.pid, signal.SIGKILL)
            lines, err = child.finish(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode != -signal.SIGKILL:
            # The writer stopped by itself: with a restarted server that is a
            # memlane error; anything else is raw.
            raw = "memlane.errors" not in err
            got["raw"] += raw
            if raw or not restart:
                last = err.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
                print(
                    f"kill -9 during {op} ({backend}), seed {seed}, round {round_}:"
                    f" the writer stopped by itself: {last[0]}",
                    file=sys.stderr,
                    flush=True,
                )
                _debug(err)
        for line in lines:
            if line.endswith("\n"):  # a line cut by the kill was never acknowledged
                exp.apply(line.split())
        if backend == "postgres":
            _wait_for_dead_sessions(server)
        try:
            lost, wrong = _check(store, cache, exp)
        except MemlaneError:
            lost, wrong = 0, 1
        except Exception:
            lost, wrong = 0, 1
            got["raw"] += 1
        got.update(lost=lost, wrong=wrong, inconsistent=int(wrong > 0))
        if lost or wrong:
            print(
                f"kill -9 during {op} ({backend}), seed {seed}, round {round_}:"
                f" {lost} lost, {wrong} wrong",
                file=sys.stderr,
                flush=True,
            )
    return got


def damaged_trial(kind: str, seed: int, work: Path) -> tuple[int, int, int]:
    """Flips bytes of a snapshot file (must be rebuilt), or of memory.db or the vector
    file beside it (must open consistent or raise a MemlaneError)."""
    rng = random.Random(seed)
    store = work / f"d-{kind}-{seed}"
    with Memory(store, WordHashEmbedder()) as mem:
        ids = {r.id for r in mem.add_many([{"text": f"fact {seed} {i}"} for i in range(300)])}
    if kind == "snapshot":
        files = sorted(p for p in (store / "index").rglob("*.bin"))
    elif kind == "vector":
        files = [store / "vectors.log"]
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


def _names(given: str, allowed: tuple[str, ...], what: str) -> list[str]:
    names = [n.strip() for n in given.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise SystemExit(f"{what}: unknown {unknown or given!r}; choose from {','.join(allowed)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ops", default=",".join(OPS), help="the writes killed by kill -9")
    parser.add_argument("--faults", default=",".join(FAULTS), help="kill, damaged, disk")
    parser.add_argument(
        "--backend",
        choices=("all", "sqlite", "postgres"),
        default="all",
        help="for kill -9 (all: PostgreSQL too when MEMLANE_PG_BIN is set)",
    )
    args = parser.parse_args()
    ops = _names(args.ops, OPS, "--ops")
    faults = _names(args.faults, FAULTS, "--faults")
    rows: dict[str, Counter[str]] = {}
    times: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    server = None
    backends = ["sqlite"] if args.backend in ("all", "sqlite") else []
    if "kill" in faults and args.backend != "sqlite":
        from pg_server import PgServer, find_pg_bin

        pg_bin = os.environ.get("MEMLANE_PG_BIN")
        found = Path(pg_bin) if pg_bin else find_pg_bin() if args.backend == "postgres" else None
        if found is not None:
            server = PgServer(found).start()
            backends.append("postgres")
        elif args.backend == "postgres":
            raise SystemExit("no PostgreSQL server binaries: set MEMLANE_PG_BIN")

    def record(name: str, started: float, got: Counter[str]) -> None:
        times.setdefault(name, []).append(time.monotonic() - started)
        rows.setdefault(name, Counter()).update(got, trials=1)

    def outcome(lost: int, wrong: int, raw: int) -> Counter[str]:
        return Counter(lost=lost, wrong=wrong, raw=raw, inconsistent=int(wrong > 0))

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            for t in range(args.trials):
                seed = args.seed * 1000 + t
                for backend in backends if "kill" in faults else []:
                    for op in ops:
                        restart = backend == "postgres" and op == "add_many"
                        also = ", server restarted" if restart else ""
                        started = time.monotonic()
                        got = kill_trial(backend, op, seed, work, server, restart)
                        record(f"kill -9 during {op} ({backend}{also})", started, got)
                for kind in ("snapshot", "database", "vector") if "damaged" in faults else ():
                    started = time.monotonic()
                    got = outcome(*damaged_trial(kind, seed, work))
                    record(f"damaged {kind} file", started, got)
                if "disk" in faults:
                    started = time.monotonic()
                    full = disk_full_trial(seed, work)
                    if isinstance(full, str):
                        notes["disk full (tmpfs)"] = full
                    else:
                        record("disk full (tmpfs)", started, outcome(*full))
        finally:
            if server is not None:
                server.stop()
            shutil.rmtree(work, ignore_errors=True)
    head = (
        "fault",
        "trials",
        "acknowledged writes lost",
        "wrong answers after recovery",
        "stores reopened inconsistent",
        "raw exceptions",
        "median s per trial",
    )
    print("| " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * (len(head) - 1))
    for name, c in rows.items():
        median = statistics.median(times[name])
        print(
            f"| {name} | {c['trials']} | {c['lost']} | {c['wrong']} | {c['inconsistent']}"
            f" | {c['raw']} | {median:.1f} |"
        )
    for name, why in notes.items():
        print(f"| {name} | skipped: {why} |" + " |" * (len(head) - 2))
    bad = sum(c["lost"] + c["wrong"] + c["raw"] for c in rows.values())
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
