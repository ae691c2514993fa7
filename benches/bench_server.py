"""memlane serve against chromadb's own server (``chroma run``), over the same vectors in
the same run: search requests per second and p50/p99 latency with 1, 8 and 32 concurrent
clients, each query given as text and as a vector (k=10), the recall@10 of each against
exact search, and where one memlane request's time goes.

    python benches/bench_server.py [--n 100000] [--chroma PATH] [--seconds 10]
        [--repeats 3] [--clients 1,8,32] [--workdir DIR]

The memories are WordNet glosses (benches/_data.py: ``../shared/data/`` beside the
repository) with their vectors under memlane's default embedder (int8 all-MiniLM-L6-v2,
cached in ``benches/.cache/``); ``n`` of them, in a fixed shuffled order, are stored in
both systems, and the glosses left over are the queries, each asked once in a run (so no
embedding cache answers one). Given a vector, both get the query's vector; given text,
memlane gets the text and embeds it with the store's embedder, while chromadb's server
does not embed (its client does, with all-MiniLM-L6-v2 by default): its client here
embeds each text as chromadb's client does, but with the int8 model memlane's server
uses and without padding it to 256 tokens (``ChromaClientEmbedder``), and its latency
counts that. Given text as shipped (``text-shipped``), chromadb's client embeds with its
default embedding function itself, padding and all, on the int8 model
(``ChromaShippedEmbedder``; it needs ``chromadb`` importable here). memlane searches in
``mode="vector"``, as chromadb does, with ``track_access`` off (a search then writes
nothing).

``--chroma`` is the ``chroma`` command (``pip install chromadb``, in a virtualenv of its
own if you like: only its server is used, over HTTP). Both servers are asked by the same
client: a thin HTTP/1.1 keep-alive client on a raw socket, one thread per client, four
clients a process, so that the client's own work stays small beside a server's. Each
client count is run ``--repeats`` times, the two systems taking turns, and the medians
are reported. ``--workdir`` keeps both built stores there for the next run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import wordnet_texts, wordnet_vectors

K = 10
PER_PROCESS = 4  # clients a client process runs, one thread each
CHROMA_DB = "/api/v2/tenants/default_tenant/databases/default_database"
CASES = ("vector", "text", "text-shipped")


def data(n: int) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """The stored texts and vectors, then the queries' (every gloss not stored)."""
    texts, vectors = wordnet_texts(), wordnet_vectors()
    order = np.random.default_rng(7).permutation(len(texts))
    stored, asked = order[:n], order[n:]
    if len(asked) < 1000:
        raise SystemExit(f"--n {n} leaves {len(asked)} glosses to ask; at most {len(texts) - 1000}")
    return (
        [texts[i] for i in stored],
        np.ascontiguousarray(vectors[stored]),
        [texts[i] for i in asked],
        np.ascontiguousarray(vectors[asked]),
    )


def exact(points: np.ndarray, asked: np.ndarray) -> list[set[int]]:
    return [set(np.argpartition(-(points @ q), K)[:K].tolist()) for q in asked]


# -- the client ---------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection on a raw socket: a request is one send, an
    answer is read by its Content-Length (or its chunks)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = port
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + body)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._more()
        header, self.buf = self.buf[:end].lower(), self.buf[end + 4 :]
        status = int(header[9:12])
        if b"transfer-encoding: chunked" in header:
            return status, self._chunks()
        length = int(header.split(b"content-length:")[1].split(b"\r\n")[0])
        return status, self._take(length)

    def _more(self) -> None:
        got = self.sock.recv(1 << 16)
        if not got:
            raise ConnectionError("the server closed the connection")
        self.buf += got

    def _take(self, length: int) -> bytes:
        while len(self.buf) < length:
            self._more()
        out, self.buf = self.buf[:length], self.buf[length:]
        return out

    def _chunks(self) -> bytes:
        out = b""
        while True:
            while (end := self.buf.find(b"\r\n")) < 0:
                self._more()
            size = int(self.buf[:end].split(b";")[0], 16)
            self.buf = self.buf[end + 2 :]
            out += self._take(size + 2)[:size]
            if size == 0:
                return out


def memlane_model() -> Path:
    """The default embedder's ONNX file (memlane's int8 all-MiniLM-L6-v2)."""
    from memlane.embeddings import _model_files

    return _model_files._package_file(
        _model_files.MODEL_PACKAGE, _model_files.MODEL_FILE, _model_files.MODEL_INSTALL
    )


class ChromaClientEmbedder:
    """What chromadb's client does to embed a question (its default embedding function,
    ``ONNXMiniLM_L6_V2._forward``), on memlane's int8 model: a session with chromadb's
    options (onnxruntime's default threads), one model run per question, mean pooling
    under the mask. Two departures, both in chromadb's favour: the int8 model (its fp32
    one is a download this machine cannot make), and no padding (chromadb's tokenizer
    pads every text to 256 tokens). Not memlane's OnnxEmbedder, whose own choices (its
    threads, one run for the questions of several threads) are what is measured on
    memlane's side."""

    def __init__(self) -> None:
        import onnxruntime as ort

        from memlane.embeddings import _model_files
        from memlane.embeddings.tokenizer import load_tokenizer

        model = memlane_model()
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = load_tokenizer(_model_files.TOKENIZER_FILE, 256, RuntimeError)

    def embed(self, text: str) -> np.ndarray:
        ids = np.array([self.tokenizer.encode(text).ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        feeds["token_type_ids"] = np.zeros_like(ids)
        states = self.session.run(None, feeds)[0][0]
        vector = states.mean(axis=0)
        return vector / np.linalg.norm(vector)


def chroma_model_folder(folder: Path) -> None:
    """The folder chromadb's default embedding function reads its model from, made here
    instead of downloaded: memlane's int8 model as ``model.onnx``, the same
    ``tokenizer.json``, a ``vocab.txt`` from it, and empty files for the three JSON files
    chromadb checks for but does not read."""
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    from memlane.embeddings import default_tokenizer_path

    files = folder / ONNXMiniLM_L6_V2.EXTRACTED_FOLDER_NAME
    files.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(memlane_model(), files / "model.onnx")
    tokenizer = default_tokenizer_path()
    shutil.copyfile(tokenizer, files / "tokenizer.json")
    vocab = json.loads(tokenizer.read_text())["model"]["vocab"]
    (files / "vocab.txt").write_text("".join(f"{t}\n" for t in sorted(vocab, key=vocab.get)))
    for name in ("config.json", "special_tokens_map.json", "tokenizer_config.json"):
        (files / name).write_text("{}")


class ChromaShippedEmbedder:
    """chromadb's default embedding function itself (``ONNXMiniLM_L6_V2``, its code
    unchanged: its tokenizer padding every text to 256 tokens, its session, its pooling),
    what a chromadb user's ``collection.query(query_texts=...)`` runs, reading its model
    from ``chroma_model_folder``. The one departure is in chromadb's favour: the int8
    model, where chromadb downloads the fp32 one."""

    def __init__(self, folder: Path) -> None:
        from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

        class Shipped(ONNXMiniLM_L6_V2):
            DOWNLOAD_PATH = folder

        self.function = Shipped()

    def embed(self, text: str) -> np.ndarray:
        return np.asarray(self.function([text])[0])


class Asker:
    """How one system is asked a query: its path, its body, and the ids of its answer.
    Given text, chromadb's client embeds the question: as its default embedding function
    does but without the padding (``text``), or with that function itself
    (``text-shipped``); memlane's server gets the text in both cases."""

    def __init__(self, system: str, case: str, path: str, models: str = "") -> None:
        self.system, self.case, self.path = system, case, path
        self.embedder: Any = None
        if system == "chroma" and case == "text":
            self.embedder = ChromaClientEmbedder()
        elif system == "chroma" and case == "text-shipped":
            self.embedder = ChromaShippedEmbedder(Path(models))

    def body(self, text: str, vector: np.ndarray) -> bytes:
        if self.system == "memlane":
            given_text = self.case != "vector"
            asked: dict[str, Any] = {"query": text} if given_text else {"query": ""}
            if self.case == "vector":
                asked["query_embedding"] = np.asarray(vector)  # orjson writes no memmap
            asked.update(mode="vector", k=K, track_access=False)
        else:
            if self.embedder is not None:
                vector = self.embedder.embed(text)
            asked = {
                "query_embeddings": [np.asarray(vector)],
                "n_results": K,
                # chromadb's default: each hit's text and metadata, as memlane's hits
                # carry their record.
                "include": ["documents", "metadatas", "distances"],
            }
        return orjson.dumps(asked, option=orjson.OPT_SERIALIZE_NUMPY)

    def ids(self, answer: bytes) -> list[int]:
        reply = orjson.loads(answer)
        if self.system == "memlane":
            return [int(h["record"]["id"]) for h in reply["hits"]]
        return [int(i) for i in reply["ids"][0]]

    def ask(self, conn: Connection, text: str, vector: np.ndarray) -> bytes:
        status, answer = conn.call("POST", self.path, self.body(text, vector))
        if status != 200:
            raise RuntimeError(f"{self.system}: HTTP {status}: {answer[:300]!r}")
        return answer


def _client_process(job: dict[str, Any], barrier: Any, out: Any) -> None:
    """``job["threads"]`` clients, each asking queries ``first + i, first + i + stride, ...``
    for ``job["seconds"]`` once every process is ready."""
    asker = Asker(job["system"], job["case"], job["path"], job["models"])
    texts, vectors = job["texts"], np.load(job["vectors"], mmap_mode="r")
    stop = [0.0]
    latencies: list[list[float]] = [[] for _ in range(job["threads"])]
    conns = [Connection(job["port"]) for _ in range(job["threads"])]
    for c in conns:  # one warm request each, not counted
        asker.ask(c, texts[0], vectors[0])
    ready = threading.Barrier(job["threads"] + 1)

    def run(i: int) -> None:
        conn, mine = conns[i], latencies[i]
        j = job["first"] + i
        ready.wait()
        while time.monotonic() < stop[0]:
            q = j % len(texts)
            t = time.perf_counter()
            asker.ask(conn, texts[q], vectors[q])
            mine.append(time.perf_counter() - t)
            j += job["stride"]

    pool = [threading.Thread(target=run, args=(i,)) for i in range(job["threads"])]
    for t in pool:
        t.start()
    barrier.wait()  # every process has connected and warmed up
    stop[0] = time.monotonic() + job["seconds"]
    ready.wait()
    for t in pool:
        t.join()
    for c in conns:
        c.close()
    out.put([x for part in latencies for x in part])


def load(base: dict[str, Any], clients: int, first: int) -> dict[str, float]:
    """Requests per second and p50/p99 latency of ``clients`` clients at once."""
    ctx = multiprocessing.get_context("spawn")
    processes = -(-clients // PER_PROCESS)
    barrier, out = ctx.Barrier(processes + 1), ctx.Queue()
    shares = [clients // processes + (i < clients % processes) for i in range(processes)]
    # Client c asks queries first + c, first + c + clients, ...: no two ask the same.
    jobs, client = [], 0
    for share in shares:
        jobs.append({**base, "threads": share, "first": first + client, "stride": clients})
        client += share
    procs = [ctx.Process(target=_client_process, args=(job, barrier, out)) for job in jobs]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    latencies = sorted(x for _ in procs for x in out.get(timeout=base["seconds"] + 300))
    for p in procs:
        p.join()
    return {
        "rps": len(latencies) / base["seconds"],
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
        "requests": len(latencies),
    }


def recall(asker: Asker, port: int, texts: list[str], vectors: np.ndarray, truth: Any) -> float:
    conn, found = Connection(port), 0
    for text, vector, best in zip(texts, vectors, truth, strict=True):
        found += len(best & set(asker.ids(asker.ask(conn, text, vector))))
    conn.close()
    return found / (K * len(truth))


def round_trip(port: int, path: str, times: int = 2000) -> float:
    """The median round trip of a GET that does no work (the HTTP stack and the client)."""
    conn, took = Connection(port), []
    for _ in range(times):
        t = time.perf_counter()
        status, _ = conn.call("GET", path)
        took.append(time.perf_counter() - t)
        assert status == 200
    conn.close()
    return statistics.median(took) * 1e3


# -- the servers --------------------------------------------------------------------------


def build_memlane(folder: Path, texts: list[str], points: np.ndarray) -> float:
    from memlane import Memory

    began = time.perf_counter()
    with Memory(folder) as mem:  # the default embedder: the one the vectors came from
        for s in range(0, len(points), 5000):
            part = zip(texts[s : s + 5000], points[s : s + 5000], strict=True)
            mem.add_many(
                [{"text": t, "id": str(s + i), "embedding": v} for i, (t, v) in enumerate(part)]
            )
        mem.wait_indexed()
    return time.perf_counter() - began


def build_chroma(port: int, texts: list[str], points: np.ndarray) -> tuple[str, float]:
    """The collection's query path (made and filled unless it is there already): each
    vector with its text as the document, as memlane stores each with its text."""
    began, conn = time.perf_counter(), Connection(port)
    status, answer = conn.call("GET", f"{CHROMA_DB}/collections/bench")
    if status == 200:
        return f"{CHROMA_DB}/collections/{orjson.loads(answer)['id']}/query", 0.0
    made = {"name": "bench", "configuration": {"hnsw": {"space": "cosine"}}}
    status, answer = conn.call("POST", f"{CHROMA_DB}/collections", orjson.dumps(made))
    assert status == 200, answer
    collection = f"{CHROMA_DB}/collections/{orjson.loads(answer)['id']}"
    for s in range(0, len(points), 1000):
        part = points[s : s + 1000]
        body = {
            "ids": [str(s + i) for i in range(len(part))],
            "embeddings": part,
            "documents": texts[s : s + len(part)],
        }
        status, answer = conn.call(
            "POST", f"{collection}/add", orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
        )
        assert status in (200, 201), answer
    conn.close()
    return f"{collection}/query", time.perf_counter() - began


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], port: int, health: str) -> subprocess.Popen[bytes]:
    """A server process, once ``health`` answers on ``port``."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            conn = Connection(port)
            status, _ = conn.call("GET", health)
            conn.close()
            if status == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"{args[0]} stopped at once ({' '.join(args)})")
        time.sleep(0.1)
    raise SystemExit(f"{args[0]} did not answer")


# -- where a request's time goes ----------------------------------------------------------


def breakdown(folder: Path, texts: list[str], vectors: np.ndarray) -> dict[str, float]:
    """One memlane search's parts in process, each the median of a few passes over the
    queries: the search given a vector and given text (which embeds), the body read, the
    answer written, the whole ASGI app (Starlette and the route), and the model alone (a
    question's tokens, one question, and 8 threads asking at once). With 8 threads, the
    wall time per question of 8 threads searching (or embedding) fresh questions at
    once: where the time of a request goes at 8 clients, less HTTP."""
    from memlane import Memory
    from memlane.embeddings import OnnxEmbedder
    from memlane.server import create_app
    from memlane.server.calls import hit_json, json_bytes

    asked = [(t, v.tolist()) for t, v in zip(texts[:200], vectors[:200], strict=True)]
    bodies = [Asker("memlane", "vector", "").body(t, np.asarray(v)) for t, v in asked]

    def per_query(work: Any, passes: int = 5) -> float:
        took = []
        for _ in range(passes):
            t = time.perf_counter()
            for i, (text, vector) in enumerate(asked):
                work(i, text, vector)
            took.append((time.perf_counter() - t) / len(asked))
        return statistics.median(took) * 1e3

    out: dict[str, float] = {}
    with Memory(folder) as mem:
        opts: dict[str, Any] = {"mode": "vector", "track_access": False}
        per_query(lambda i, t, v: mem.search("", K, query_embedding=v, **opts), 1)
        out["engine_vector_ms"] = per_query(
            lambda i, t, v: mem.search("", K, query_embedding=v, **opts)
        )
        # Texts not asked before (the embedder keeps the vectors of recent ones).
        fresh = iter(texts[200:])
        out["engine_text_ms"] = per_query(lambda i, t, v: mem.search(next(fresh), K, **opts), 2)
        out["engine_hybrid_text_ms"] = per_query(
            lambda i, t, v: mem.search(next(fresh), K, track_access=False), 2
        )
        hits = mem.search("", K, query_embedding=asked[0][1], **opts)
        out["body_read_ms"] = per_query(lambda i, t, v: orjson.loads(bodies[i]))
        out["answer_ms"] = per_query(
            lambda i, t, v: json_bytes({"hits": [hit_json(h) for h in hits]})
        )
        out["app_in_process_ms"] = _app_in_process(create_app(mem), bodies)
        out["engine_text_8_threads_ms"] = _in_threads(
            lambda t: mem.search(t, K, **opts), texts[1000:2200], 8
        )
    model = OnnxEmbedder()
    out["tokenize_ms"] = per_query(lambda i, t, v: model._tokenizer.encode(t))
    out["model_one_text_ms"] = per_query(lambda i, t, v: model.embed(t), 2)
    out["model_8_threads_ms"] = _in_threads(model.embed, texts[2200:3400], 8)
    return out


def _in_threads(work: Any, texts: list[str], threads: int, passes: int = 3) -> float:
    """The median wall time per text of ``threads`` threads calling ``work`` on their
    share of a pass's texts at once (each pass its own texts)."""
    took = []
    for p in range(passes):
        part = texts[p::passes]
        shares = [part[s::threads] for s in range(threads)]
        pool = [threading.Thread(target=lambda mine: [work(t) for t in mine], args=(share,))
                for share in shares]  # fmt: skip
        t = time.perf_counter()
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        took.append((time.perf_counter() - t) / len(part))
    return statistics.median(took) * 1e3


def _app_in_process(app: Any, bodies: list[bytes]) -> float:
    """The median time of a search through the ASGI app, without a socket or a parser."""

    async def call(body: bytes) -> None:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/v1/search",
            "raw_path": b"/v1/search", "root_path": "", "query_string": b"",
            "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
        }  # fmt: skip
        await app(scope, receive, send)
        assert sent[0]["status"] == 200, sent

    async def passes() -> float:
        took = []
        for _ in range(6):
            t = time.perf_counter()
            for body in bodies:
                await call(body)
            took.append((time.perf_counter() - t) / len(bodies))
        return statistics.median(took[1:]) * 1e3

    try:
        import uvloop

        return uvloop.run(passes())
    except ImportError:
        return asyncio.run(passes())


# -- the run ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="queries for recall")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chroma", default=shutil.which("chroma") or "chroma")
    parser.add_argument("--workdir", type=Path, help="keep the built stores here")
    args = parser.parse_args()
    texts, points, q_texts, q_vectors = data(args.n)
    truth = exact(points, q_vectors[: args.queries])
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        vectors_file = Path(tmp) / "queries.npy"
        np.save(vectors_file, q_vectors)
        results = run(args, work, texts, points, q_texts, vectors_file, truth)
        results["memlane in process"] = breakdown(work / "memlane", q_texts, q_vectors)
    print(json.dumps(results, indent=1))


def run(
    args: argparse.Namespace,
    work: Path,
    texts: list[str],
    points: np.ndarray,
    q_texts: list[str],
    vectors_file: Path,
    truth: list[set[int]],
) -> dict[str, Any]:
    marker = work / f"built-{args.n}-texts"  # both stores were built whole, texts in both
    built = {"memlane": 0.0, "chroma": 0.0}
    if not marker.exists():
        shutil.rmtree(work / "memlane", ignore_errors=True)
        shutil.rmtree(work / "chroma", ignore_errors=True)
        built["memlane"] = build_memlane(work / "memlane", texts, points)
    ports = {"memlane": free_port(), "chroma": free_port()}
    serve = [sys.executable, "-m", "memlane", "serve", str(work / "memlane")]
    chroma = [args.chroma, "run", "--path", str(work / "chroma"), "--host", "127.0.0.1"]
    servers = [
        start([*serve, "--port", str(ports["memlane"])], ports["memlane"], "/health"),
        start([*chroma, "--port", str(ports["chroma"])], ports["chroma"], "/api/v2/heartbeat"),
    ]
    paths = {"memlane": "/v1/search"}
    try:
        paths["chroma"], built["chroma"] = build_chroma(ports["chroma"], texts, points)
        marker.touch()
        results: dict[str, Any] = {"n": args.n, "built_s": built}
        results["round trip of a GET doing nothing, ms"] = {
            "memlane /health": round_trip(ports["memlane"], "/health"),
            "chroma /api/v2/heartbeat": round_trip(ports["chroma"], "/api/v2/heartbeat"),
        }
        asked = np.load(vectors_file, mmap_mode="r")
        first = 0  # each run asks queries no earlier run asked, while there are some
        cases = args.cases.split(",")
        if "text-shipped" in cases:
            if importlib.util.find_spec("chromadb") is None:
                print("given text-shipped: skipped (chromadb is not importable here)")
                cases.remove("text-shipped")
            else:
                chroma_model_folder(work / "chroma-model")
        for case in cases:
            runs: dict[str, dict[int, list[dict[str, float]]]] = {"memlane": {}, "chroma": {}}
            entry: dict[str, Any] = {}
            for system in runs:
                asker = Asker(system, case, paths[system], str(work / "chroma-model"))
                n = len(truth)
                entry[f"{system} recall@10"] = recall(
                    asker, ports[system], q_texts[:n], asked[:n], truth
                )
            for _ in range(args.repeats):
                for clients in map(int, args.clients.split(",")):
                    for system in runs:
                        base = {
                            "system": system, "case": case, "path": paths[system],
                            "port": ports[system], "texts": q_texts,
                            "vectors": str(vectors_file), "seconds": args.seconds,
                            "models": str(work / "chroma-model"),
                        }  # fmt: skip
                        got = load(base, clients, first)
                        first += int(got["requests"]) + clients
                        runs[system].setdefault(clients, []).append(got)
                        print(json.dumps({case: {system: {clients: got}}}), flush=True)
            for clients in map(int, args.clients.split(",")):
                row = {
                    system: {
                        key: statistics.median(r[key] for r in runs[system][clients])
                        for key in ("rps", "p50_ms", "p99_ms")
                    }
                    for system in runs
                }
                row["memlane / chroma"] = row["memlane"]["rps"] / row["chroma"]["rps"]
                entry[f"{clients} clients"] = row
            results[f"given {case}"] = entry
            print(json.dumps({case: entry}, indent=1), flush=True)
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait()
    return results


if __name__ == "__main__":
    main()
