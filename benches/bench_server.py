"""memlane serve against chromadb's own server (``chroma run``), over the same vectors in
the same run: search requests per second and p50/p99 latency with 1, 8 and 32 concurrent
clients, each query a given vector (k=10), and the recall@10 of each against exact
search; then where one memlane request's time goes.

    python benches/bench_server.py [--n 100000] [--chroma PATH] [--seconds 10]

``--chroma`` is the ``chroma`` command (``pip install chromadb``, in a virtualenv of its
own if you like: only its server is used, over HTTP). Both servers are asked by the same
client code (httpx, in several processes, so that the client is not what is measured).
The vectors are 384-d, near a subspace of few dimensions as a text embedder's are,
with queries near stored ones. Queries by text are not compared: chromadb's server does
not embed, its clients do (with a model downloaded at first use).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

DIM, K = 384, 10
CHROMA_DB = "/api/v2/tenants/default_tenant/databases/default_database"


class GivenVectors:
    """Stands for the embedder of a store whose vectors are all given."""

    name = "bench:given-vectors"
    dimension = DIM

    def embed(self, text: str) -> Any:
        raise RuntimeError("this bench gives every vector")

    def embed_batch(self, texts: Any) -> Any:
        raise RuntimeError("this bench gives every vector")


def data(n: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors near a 24-dimensional subspace (a text embedder's vectors span few
    directions), and queries near stored ones."""
    rng = np.random.default_rng(7)
    basis = rng.standard_normal((24, DIM)).astype(np.float32)
    latent = rng.standard_normal((n, 24)).astype(np.float32)
    points = latent @ basis + 0.5 * rng.standard_normal((n, DIM)).astype(np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    near = latent[rng.integers(0, n, queries)]
    asked = (near + 0.3 * rng.standard_normal(near.shape).astype(np.float32)) @ basis
    asked /= np.linalg.norm(asked, axis=1, keepdims=True)
    return points, asked.astype(np.float32)


def exact(points: np.ndarray, asked: np.ndarray) -> list[set[int]]:
    out = []
    for q in asked:
        scores = points @ q
        out.append(set(np.argpartition(-scores, K)[:K].tolist()))
    return out


# -- the two servers, asked alike -------------------------------------------------------


def memlane_request(url: str, vector: list[float]) -> tuple[str, dict[str, Any]]:
    body = {"query": "", "query_embedding": vector, "mode": "vector", "k": K}
    return f"{url}/v1/search", {**body, "track_access": False}


def memlane_ids(reply: dict[str, Any]) -> list[int]:
    return [int(h["record"]["id"]) for h in reply["hits"]]


def chroma_request(url: str, vector: list[float]) -> tuple[str, dict[str, Any]]:
    body = {"query_embeddings": [vector], "n_results": K, "include": ["distances"]}
    return url, body


def chroma_ids(reply: dict[str, Any]) -> list[int]:
    return [int(i) for i in reply["ids"][0]]


SYSTEMS = {"memlane": (memlane_request, memlane_ids), "chroma": (chroma_request, chroma_ids)}


def _worker(args: tuple[str, str, list[list[float]], int, float, int]) -> list[float]:
    system, url, vectors, threads, seconds, offset = args
    request = SYSTEMS[system][0]
    latencies: list[float] = []
    lock = threading.Lock()
    start = time.monotonic() + 0.5  # every worker begins together
    stop = start + seconds

    def run(i: int) -> None:
        with httpx.Client(timeout=60) as client:
            time.sleep(max(0.0, start - time.monotonic()))
            j = offset + i
            while time.monotonic() < stop:
                where, body = request(url, vectors[j % len(vectors)])
                t = time.perf_counter()
                r = client.post(where, json=body)
                took = time.perf_counter() - t
                r.raise_for_status()
                with lock:
                    latencies.append(took)
                j += 97

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return latencies


def load(
    system: str, url: str, vectors: list[list[float]], clients: int, seconds: float
) -> dict[str, float]:
    processes = min(clients, 4)
    shares = [clients // processes + (i < clients % processes) for i in range(processes)]
    jobs = [(system, url, vectors, s, seconds, i * 1000) for i, s in enumerate(shares)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        latencies = sorted(x for part in pool.map(_worker, jobs) for x in part)
    return {
        "rps": len(latencies) / seconds,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
    }


def recall(system: str, url: str, asked: np.ndarray, truth: list[set[int]]) -> float:
    request, ids = SYSTEMS[system]
    found = 0
    with httpx.Client(timeout=60) as client:
        for q, best in zip(asked, truth, strict=True):
            where, body = request(url, q.tolist())
            r = client.post(where, json=body)
            r.raise_for_status()
            found += len(best & set(ids(r.json())))
    return found / (K * len(truth))


# -- starting them ----------------------------------------------------------------------


def start(args: list[str], said: re.Pattern[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(args, stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if found := said.search(line):
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, found.group(1)
    raise SystemExit(f"{args[0]} did not start")


def build_memlane(folder: Path, points: np.ndarray) -> float:
    from memlane import Memory

    began = time.perf_counter()
    with Memory(folder, GivenVectors()) as mem:  # type: ignore[arg-type]
        for s in range(0, len(points), 5000):
            part = points[s : s + 5000]
            mem.add_many(
                [
                    {"text": f"m{s + i}", "id": str(s + i), "embedding": v}
                    for i, v in enumerate(part)
                ]
            )
        mem.wait_indexed()
    return time.perf_counter() - began


def build_chroma(url: str, points: np.ndarray) -> tuple[str, float]:
    began = time.perf_counter()
    with httpx.Client(timeout=600) as c:
        made = c.post(
            f"{url}{CHROMA_DB}/collections",
            json={"name": "bench", "configuration": {"hnsw": {"space": "cosine"}}},
        )
        made.raise_for_status()
        collection = f"{url}{CHROMA_DB}/collections/{made.json()['id']}"
        for s in range(0, len(points), 1000):
            part = points[s : s + 1000]
            body = {"ids": [str(s + i) for i in range(len(part))], "embeddings": part.tolist()}
            c.post(f"{collection}/add", json=body).raise_for_status()
    return f"{collection}/query", time.perf_counter() - began


def breakdown(folder: Path, asked: np.ndarray) -> dict[str, float]:
    """One memlane search's parts, in process: the engine call, the answer's JSON."""
    from memlane import Memory
    from memlane.server.calls import hit_json

    with Memory(folder, GivenVectors()) as mem:  # type: ignore[arg-type]
        vectors = [q.tolist() for q in asked]
        for v in vectors[:20]:
            mem.search("", K, mode="vector", query_embedding=v, track_access=False)
        t = time.perf_counter()
        for v in vectors:
            hits = mem.search("", K, mode="vector", query_embedding=v, track_access=False)
        engine = (time.perf_counter() - t) / len(vectors)
        t = time.perf_counter()
        for _ in vectors:
            json.dumps({"hits": [hit_json(h) for h in hits]})
        encode = (time.perf_counter() - t) / len(vectors)
    return {"engine_ms": engine * 1e3, "json_ms": encode * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--chroma", default=shutil.which("chroma") or "chroma")
    args = parser.parse_args()
    points, asked = data(args.n, args.queries)
    truth = exact(points, asked)
    vectors = [q.tolist() for q in asked]
    results: dict[str, Any] = {"n": args.n, "systems": {}}
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        folder = Path(tmp)
        built = build_memlane(folder / "memlane", points)
        memlane, url = start(
            [sys.executable, "-m", "memlane", "serve", str(folder / "memlane"), "--port", "0"],
            re.compile(r"serving .* on (http://\S+)"),
        )
        chroma, chroma_url = _start_chroma(args.chroma, folder / "chroma")
        try:
            query_url, chroma_built = build_chroma(chroma_url, points)
            targets = {"memlane": url, "chroma": query_url}
            for system, target in targets.items():
                entry: dict[str, Any] = {
                    "build_s": built if system == "memlane" else chroma_built,
                    "recall@10": recall(system, target, asked, truth),
                }
                for clients in map(int, args.clients.split(",")):
                    entry[f"{clients} clients"] = load(
                        system, target, vectors, clients, args.seconds
                    )
                results["systems"][system] = entry
                print(json.dumps({system: entry}, indent=1), flush=True)
        finally:
            for proc in (memlane, chroma):
                proc.terminate()
                proc.wait()
        results["memlane in process"] = breakdown(folder / "memlane", asked)
    print(json.dumps(results, indent=1))


def _start_chroma(command: str, path: Path) -> tuple[subprocess.Popen[str], str]:
    """``chroma run`` on a free port, once it answers its heartbeat."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [command, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                return proc, url  # type: ignore[return-value]
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise SystemExit("chroma run stopped at once")
        time.sleep(0.1)
    raise SystemExit("chroma run did not answer")


if __name__ == "__main__":
    main()
