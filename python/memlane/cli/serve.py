"""``memlane serve``: the record API of a store over HTTP (memlane.server)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import sys
from typing import Any

from memlane.cli._command import at_least, command, open_memory, seconds
from memlane.errors import InvalidArgumentError, MemlaneError

__all__: list[str] = []


class ServerUnavailableError(MemlaneError, ImportError):
    """The server's packages (the ``server`` extra) are not installed."""


#: The environment variable holding one more full-access API key.
KEY_ENV = "MEMLANE_API_KEY"
#: Seconds a request's head may take to arrive, from the connection or the last answer.
HEAD_TIMEOUT = 10.0
#: Bytes a request's head may have (nginx's largest default headers are 32 KiB).
MAX_HEAD = 64 * 1024


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1; any other needs an API key)",
    )
    p.add_argument(
        "--port",
        type=at_least(0, 65535),
        default=8765,
        help="0 to 65535 (default 8765; 0: any free)",
    )
    p.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help=f"a key with full access (repeatable; also ${KEY_ENV})",
    )
    p.add_argument(
        "--keys-file",
        metavar="FILE",
        help='a JSON list of keys, each {"key": ..., "scope": {"user_id": ...}, '
        '"read_only": true} (docs/server.md)',
    )
    p.add_argument("--max-body", type=at_least(1), help="the largest JSON body, in bytes")
    p.add_argument(
        "--max-upload", type=at_least(1), help="the largest ingest or import upload, in bytes"
    )
    p.add_argument("--ingest-root", metavar="DIR", help="a folder /v1/ingest may read by path")
    p.add_argument(
        "--max-streams",
        type=at_least(1),
        help="the /v1/events streams served at once (default 1,000; more are refused, 503)",
    )
    p.add_argument(
        "--head-timeout",
        type=seconds,
        default=HEAD_TIMEOUT,
        help=f"the seconds a request's head may take to arrive (default {HEAD_TIMEOUT:g}; "
        f"past them, 408), of at most {MAX_HEAD // 1024} KiB (past that, 431)",
    )
    p.add_argument(
        "--max-connections",
        type=at_least(1),
        help="the connections open at once (default 4,096, fewer where the process may not "
        "open two files for each; more are refused, 503)",
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@command(
    "serve",
    "serve a store's record API over HTTP (memlane[server])",
    arguments=_arguments,
    store=True,
    creates=True,
)
def serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from memlane.server import ApiKey, create_app, load_keys
        from memlane.server.connections import default_max_connections, guarded_protocol
    except ImportError as e:
        raise ServerUnavailableError(
            f"memlane serve needs the server extra: pip install 'memlane[server]' ({e})"
        ) from None
    keys = [ApiKey(k, name="--api-key") for k in args.api_key or ()]
    if os.environ.get(KEY_ENV):
        keys.append(ApiKey(os.environ[KEY_ENV], name=f"${KEY_ENV}"))
    if args.keys_file is not None:
        keys += load_keys(args.keys_file)
    if not keys and not _loopback(args.host):
        raise InvalidArgumentError(
            f"--host {args.host} is reachable from other machines: give an API key "
            f"(--api-key, --keys-file or ${KEY_ENV}), or serve on 127.0.0.1"
        )
    options: dict[str, Any] = {"keys": keys, "ingest_root": args.ingest_root}
    if args.max_body is not None:
        options["max_body"] = args.max_body
    if args.max_upload is not None:
        options["max_upload"] = args.max_upload
    if args.max_streams is not None:
        options["max_streams"] = args.max_streams
    # uvicorn stops gracefully on SIGTERM, then raises it again for the handler it found:
    # the default one would end the process before the store is closed.
    signal.signal(signal.SIGTERM, _terminated)
    with contextlib.suppress(_Terminated), open_memory(args) as mem:
        app = create_app(mem, **options)
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            # No access log: uvicorn formats each request's line even where the level
            # drops it (benches/README.md, "Figures behind the code").
            access_log=False,
            server_header=False,
            # A request still running when the server stops gets this long to end.
            timeout_graceful_shutdown=2,
            # Heads bounded in time and size, connections in number (server/connections.py).
            http=guarded_protocol(
                head_timeout=args.head_timeout,
                max_head=MAX_HEAD,
                max_connections=args.max_connections or default_max_connections(),
            ),
        )
        server = uvicorn.Server(config)
        # The event streams end as soon as uvicorn begins to stop (server/stream.py).
        app.state.stopping = lambda: server.should_exit
        # The loop uvicorn.run would make: uvloop's when it is installed.
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(_run(server, mem.location))
    return 0


class _Terminated(BaseException):
    """SIGTERM: ends ``serve`` through the store's close, as Ctrl-C does."""


def _terminated(signum: int, frame: Any) -> None:
    raise _Terminated


async def _run(server: Any, store: str) -> None:
    """Serves until stopped (Ctrl-C, SIGTERM); says where once it listens."""
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"memlane: serving {store} on http://{shown}:{port}", file=sys.stderr, flush=True)
    await task
