"""memlane serve killed under load: 32 clients add and search for 5 minutes while the
server is killed with SIGKILL at a third and at two thirds of the run, and started again
at once on the same port (as a supervisor would); then every add the server acknowledged
is looked for.

    python benches/server_load.py [--setups embedded,postgres,postgres-two]
        [--seconds 300] [--clients 32] [--processes 4] [--embedder onnx]
        [--vector-checks 2000] [--control] [--json FILE]

Setups: ``embedded`` (one server over a store directory), ``postgres`` (one server over a
PostgreSQL store) and ``postgres-two`` (two servers over one PostgreSQL store, half the
clients on each, only the first killed). The PostgreSQL cluster is a throwaway one
(tests/pg_server.py, binaries from ``$MEMLANE_PG_BIN``), durable as a real one is
(fsync on); each server keeps its index snapshots in a ``--cache-dir`` of its own.
``--control`` runs the same load without the kills (its phases are the run's thirds), to
tell what the kills cost from what the store's growth and the machine did.

Each client is a thread with its own connection (``--processes`` client processes share
them, so the client side is not one interpreter's GIL). A client adds a memory of its own
(an id and a text no other client uses), then searches for that text and checks the add
is among the hits, and again. A connection refused (or reset while connecting) is
retried with the same id after 50 ms: nothing was sent. An add cut off by the kill is
"in doubt" (stored or not) and the client goes on with the next id.

What is counted: every request's outcome and latency, by phase (before the first kill,
between the kills, after the second; the windows while a server is down are left out of
the rates); errors by kind, each either expected (a connection refused or reset, or a
request cut off, overlapping a window while its server was down) or not (anything else:
an HTTP error, a timeout, a cut outside a down window); for each kill, the time until the
server listens again and until a client's next add is acknowledged. After the run,
through the servers still running: the export holds every acknowledged add with its
text, and no id no client sent; a text search finds each acknowledged add by its text
(through every server), and a vector search a sample of them; the servers' logs hold no
traceback; a clean stop and one more start give the same count.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pg_server import PgServer, find_pg_bin

SETUPS = ("embedded", "postgres", "postgres-two")
BACKOFF = 0.05  # a client's pause after a refused connection
#: Failures of a connect: the request was never sent.
NOT_SENT = ("refused", "reset")
#: What a kill may explain, in a request that overlapped the window while it was down.
EXPECTED = {
    "refused": "refused while down",
    "reset": "reset while connecting, at the kill",
    "cut": "cut off by the kill",
}

# -- what the clients write ---------------------------------------------------------------

# Who did what where: the words of the clients' sentences.
_WORDS = (
    "Alice Bob Carmen Dmitri Eun Farah Goran Hana Ivo Jun Kofi Lena Mateo Nia",
    "moved booked lost found painted sold repaired borrowed ordered returned",
    "bicycle piano kettle ticket camera lamp tent violin laptop jacket clock",
    "Porto Lisbon Oslo Quito Lagos Hanoi Tartu Cork Graz Busan Perth Leeds",
)


def ident(client: int, n: int) -> str:
    return f"load-{client}-{n}"


def text_of(client: int, n: int) -> str:
    """The text of client ``client``'s ``n``-th add: a sentence, and a mark only it has."""
    rng = random.Random(client * 1_000_003 + n)
    who, did, what, where = (rng.choice(w.split()) for w in _WORDS)
    return f"{who} {did} the {what} in {where} on day {rng.randint(1, 365)} (note c{client}n{n})"


# -- the clients (in worker processes) ----------------------------------------------------


def outcome_of(http: httpx.Client, path: str, body: Any, expect: int) -> tuple[str, Any]:
    """("ok", the JSON answer), or the kind of failure and what it said."""
    try:
        r = http.post(path, json=body)
    except httpx.ConnectError as e:
        return next((k for k in ("refused", "reset") if k in str(e)), f"connect: {e}"), None
    except httpx.TimeoutException as e:
        return f"timeout: {type(e).__name__}", None
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        return "cut", None
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}", None
    if r.status_code != expect:
        return f"HTTP {r.status_code}: {r.text[:300]}", None
    return "ok", r.json()


Event = tuple[int, str, float, float, str, int, bool]  # client, kind, start, end, outcome, n, found


def _client(client: int, url: str, begin: float, deadline: float, mode: str) -> list[Event]:
    events: list[Event] = []
    n = 0
    with httpx.Client(base_url=url, timeout=60) as http:
        time.sleep(max(0.0, begin - time.monotonic()))
        while (start := time.monotonic()) < deadline:
            text = text_of(client, n)
            body = {"id": ident(client, n), "text": text}
            outcome, _ = outcome_of(http, "/v1/memories", body, 201)
            events.append((client, "add", start, time.monotonic(), outcome, n, False))
            if outcome in NOT_SENT:
                time.sleep(BACKOFF)
                continue  # nothing was sent: the same add again
            n += 1
            if outcome != "ok":
                continue
            query = {"query": text, "k": 10, "mode": mode}
            start = time.monotonic()
            outcome, found = outcome_of(http, "/v1/search", query, 200)
            hit = found is not None and body["id"] in {h["record"]["id"] for h in found["hits"]}
            events.append((client, "search", start, time.monotonic(), outcome, n - 1, hit))
            if outcome in NOT_SENT:
                time.sleep(BACKOFF)
    return events


def _worker(job: tuple[list[tuple[int, str]], float, float, str]) -> list[Event]:
    clients, begin, deadline, mode = job
    out: list[list[Event]] = [[] for _ in clients]

    def run(i: int, client: int, url: str) -> None:
        out[i] = _client(client, url, begin, deadline, mode)

    threads = [threading.Thread(target=run, args=(i, c, u)) for i, (c, u) in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [e for part in out for e in part]


# -- the servers --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """``memlane serve`` on a port of its own, which a restart keeps."""

    def __init__(self, store: str, args: list[str]) -> None:
        self.store, self.args, self.port = store, args, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def start(self, *extra: str) -> float:
        """Starts it; the monotonic time it said it listens."""
        command = [sys.executable, "-m", "memlane", "serve", self.store, "--port"]
        self.proc = subprocess.Popen(
            [*command, str(self.port), *self.args, *extra],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if "serving" in line:
                up = time.monotonic()
                threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
                return up
        self.proc.wait()
        raise RuntimeError(f"memlane serve did not start:\n{''.join(self.log[-40:])}")

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log.append(line)

    def kill(self) -> float:
        assert self.proc is not None
        at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return at

    def stop(self) -> int | None:
        """SIGTERM; its exit status (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def tracebacks(self) -> list[str]:
        text = "".join(self.log)
        return [t.split("\n\n")[0][:2000] for t in text.split("Traceback")[1:]]


# -- after the run ------------------------------------------------------------------------


def export(url: str) -> dict[str, str]:
    """Every record the server holds, id -> text (GET /v1/export, streamed)."""
    out: dict[str, str] = {}
    with httpx.stream("GET", f"{url}/v1/export?embeddings=false", timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.strip():
                record = json.loads(line)
                out[record["id"]] = record["text"]
    return out


def search_misses(url: str, items: list[tuple[str, str]], mode: str) -> Counter[str]:
    """Of ``items`` (id, text), how many a search of their text left out of its hits
    ("missed"), and the failed searches by what the server said."""
    local = threading.local()

    def one(item: tuple[str, str]) -> str | None:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=url, timeout=120)
        body = {"query": item[1], "k": 10, "mode": mode}
        outcome, found = outcome_of(local.http, "/v1/search", body, 200)
        if found is None:
            return outcome
        return None if item[0] in {h["record"]["id"] for h in found["hits"]} else "missed"

    with ThreadPoolExecutor(8) as pool:
        return Counter(i for i in pool.map(one, items) if i is not None)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * q))] * 1e3, 1)


def phase_stats(events: list[Event], spans: dict[str, tuple[float, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (lo, hi) in spans.items():
        inside = [e for e in events if lo <= e[2] < hi and e[4] == "ok"]
        adds = [e[3] - e[2] for e in inside if e[1] == "add"]
        searches = [e[3] - e[2] for e in inside if e[1] == "search"]
        out[name] = {
            "seconds": round(hi - lo, 1),
            "adds_per_s": round(len(adds) / (hi - lo), 1),
            "searches_per_s": round(len(searches) / (hi - lo), 1),
            "add_ms_p50_p99": [percentile(adds, 0.5), percentile(adds, 0.99)],
            "search_ms_p50_p99": [percentile(searches, 0.5), percentile(searches, 0.99)],
        }
    return out


def classify(events: list[Event], down: list[tuple[float, float]]) -> Counter[str]:
    """Each failed request: expected (``EXPECTED``, while its server was down) or not
    (named by what it said)."""
    kinds: Counter[str] = Counter()
    for _, kind, start, end, outcome, _, _ in events:
        if outcome == "ok":
            continue
        overlaps = any(start <= hi and end >= lo for lo, hi in down)
        if overlaps and outcome in EXPECTED:
            kinds[f"{kind}: {EXPECTED[outcome]}"] += 1
        else:
            kinds[f"{kind}: UNEXPECTED {outcome}"] += 1
    return kinds


# -- one setup ----------------------------------------------------------------------------


def run_setup(setup: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    pg: PgServer | None = None
    servers: list[Serve]
    common = ["--embedder", args.embedder]
    if setup == "embedded":
        servers = [Serve(str(root / "store"), common)]
    else:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise SystemExit("no PostgreSQL binaries: set MEMLANE_PG_BIN")
        pg = PgServer(bin_dir, durable=True).start()
        count = 2 if setup == "postgres-two" else 1
        servers = [
            Serve(pg.url(schema="load"), [*common, "--cache-dir", str(root / f"cache{i}")])
            for i in range(count)
        ]
    try:
        return _load(setup, servers, args)
    finally:
        for s in servers:
            s.stop()
        if pg is not None:
            pg.stop()


def _load(setup: str, servers: list[Serve], args: argparse.Namespace) -> dict[str, Any]:
    mode = "text" if args.embedder == "none" else "hybrid"
    for s in servers:
        s.start("--create")
    killed = servers[0]
    url_of = {c: servers[c % len(servers)].url for c in range(args.clients)}
    shares = [list(range(args.clients))[p :: args.processes] for p in range(args.processes)]
    begin = time.monotonic() + 8  # the client processes start meanwhile
    loads = [round(os.getloadavg()[0], 1)]
    deadline = begin + args.seconds
    jobs = [([(c, url_of[c]) for c in share], begin, deadline, mode) for share in shares]
    pool = multiprocessing.get_context("spawn").Pool(args.processes)
    pending = pool.map_async(_worker, jobs)
    down: list[tuple[float, float]] = []
    for third in (1, 2):
        time.sleep(max(0.0, begin + args.seconds * third / 3 - time.monotonic()))
        if args.control:
            down.append((time.monotonic(),) * 2)  # the same phases, no kill
            continue
        at = killed.kill()
        down.append((at, killed.start()))
    events = [e for part in pending.get() for e in part]
    pool.close()
    pool.join()
    print(f"{setup}: {len(events)} requests; checking", file=sys.stderr, flush=True)

    on_killed = [e for e in events if url_of[e[0]] == killed.url]
    acked = {
        ident(e[0], e[5]): text_of(e[0], e[5]) for e in events if e[1] == "add" and e[4] == "ok"
    }
    doubt = {ident(e[0], e[5]) for e in events if e[1] == "add" and e[4] not in ("ok", *NOT_SENT)}
    result: dict[str, Any] = {
        "setup": setup,
        "servers": len(servers),
        "clients": args.clients,
        "client_processes": args.processes,
        "seconds": args.seconds,
        "killed": not args.control,
        "embedder": args.embedder,
        "search_mode": mode,
        "requests": len(events),
        "acknowledged_adds": len(acked),
        "adds_in_doubt": len(doubt),
        # The machine's 1-minute load average when the clients began and when they ended:
        # the rates below are the server's share of what the machine had to give.
        "load_average": [loads[0], round(os.getloadavg()[0], 1)],
    }
    kills = []
    for lo, up in down:
        first = min((e[3] for e in on_killed if e[1] == "add" and e[4] == "ok" and e[3] > up),
                    default=None)  # fmt: skip
        kills.append(
            {
                "at_s": round(lo - begin, 1),
                "listening_after_s": round(up - lo, 2),
                "first_ack_after_listening_s": None if first is None else round(first - up, 3),
            }
        )
    result["kills"] = kills
    spans = {
        "before": (begin, down[0][0]),
        "between": (down[0][1], down[1][0]),
        "after": (down[1][1], deadline),
    }
    result["phases"] = phase_stats(on_killed, spans)
    errors = classify(on_killed, down)
    if len(servers) > 1:
        others = [e for e in events if url_of[e[0]] != killed.url]
        result["phases_other_server"] = phase_stats(others, spans)
        errors.update({f"other server, {k}": v for k, v in classify(others, []).items()})
    result["errors"] = dict(sorted(errors.items()))
    result["searches_missing_the_add_just_made"] = sum(
        1 for e in events if e[1] == "search" and e[4] == "ok" and not e[6]
    )

    checks: dict[str, Any] = {}
    for i, s in enumerate(servers):
        held = export(s.url)
        checks[f"server {i}"] = {
            "records": len(held),
            "lost": sorted(k for k in acked if k not in held)[:20],
            "lost_count": sum(1 for k in acked if k not in held),
            "wrong_text": sum(1 for k, t in acked.items() if k in held and held[k] != t),
            "ids_never_sent": sum(1 for k in held if k not in acked and k not in doubt),
            "in_doubt_stored": sum(1 for k in doubt if k in held),
        }
        began = time.monotonic()
        missed = search_misses(s.url, sorted(acked.items()), "text")
        checks[f"server {i}"]["text_search_missed"] = dict(missed)
        checks[f"server {i}"]["text_search_check_s"] = round(time.monotonic() - began, 1)
        if mode == "hybrid" and args.vector_checks:
            sample = random.Random(i).sample(
                sorted(acked.items()), min(args.vector_checks, len(acked))
            )
            checks[f"server {i}"]["vector_search_sample"] = len(sample)
            checks[f"server {i}"]["vector_search_missed"] = dict(
                search_misses(s.url, sample, "vector")
            )
    result["check"] = checks
    result["server_tracebacks"] = [t for s in servers for t in s.tracebacks()]
    result["clean_stop_status"] = [s.stop() for s in servers]
    killed.start()
    with httpx.Client(base_url=killed.url, timeout=60) as http:
        result["count_after_clean_restart"] = http.get("/v1/count").json()["count"]
    killed.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--embedder", default="onnx", help="onnx (the default model) or none")
    parser.add_argument("--vector-checks", type=int, default=2000)
    parser.add_argument(
        "--control", action="store_true", help="the same run without the kills, to compare"
    )
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    results = []
    for setup in args.setups.split(","):
        if setup not in SETUPS:
            raise SystemExit(f"unknown setup {setup!r}: one of {', '.join(SETUPS)}")
        with tempfile.TemporaryDirectory(prefix="server-load-") as tmp:
            result = run_setup(setup, args, Path(tmp))
        print(json.dumps(result, indent=1), flush=True)
        results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
