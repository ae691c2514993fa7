"""The HTTP side of memlane's OpenAI-compatible clients (``OpenAIEmbedder``,
``OpenAIChat``): their base class, ``OpenAIHTTPClient``.

It holds the connection settings (``base_url``, a bearer ``api_key`` defaulting
to ``$OPENAI_API_KEY``, extra ``headers``, ``timeout``), checked when the client
is built; one httpx client for sync calls and one for async calls on each event
loop (each opened at its first request); JSON POSTs with retries; and closing
(``close``, ``aclose``, ``with`` and ``async with``).

A request's body is written as JSON before anything is sent: a value JSON cannot
carry (NaN, a lone surrogate, an object) raises ``InvalidArgumentError``. Each try
has ``timeout`` seconds from connecting to the answer's last byte, and an answer
may take ``cap`` bytes (``MAX_ANSWER`` unless the subclass knows better) and hold
``values`` JSON values (when the subclass knows) at most; a longer one is refused
unread, one with more values undecoded. httpx's own timeouts bound each read, not
the whole: a server that answers a byte at a time would hold a call for as long as it
likes. The async path keeps the whole try under ``asyncio.timeout``; on the sync one,
every connect, read and write waits no later than the try's deadline (``_Clipped``).
Answers are asked for uncompressed (``Accept-Encoding: identity``) and read raw: one
compressed all the same is refused unread (16 KB of zstd can inflate to 512 MB).

A POST that fails on the network (a connection error, a timeout, any other
httpx error) or with HTTP 408, 409, 429 or 5xx (500, 502, 503, 504) is tried
again, ``max_retries`` times at most, each try with a deadline of its own. The
wait before retry ``n`` (from 0) is ``backoff * 2**n`` seconds, or the response's
``Retry-After`` seconds when it gives a number; never more than 30. A failure
that may not be retried, or the last one, raises the subclass's own error
(``_error``), naming the URL, the model, the tries and the cause. No message or
repr shows the credentials: ``base_url`` is kept without its userinfo, query and
fragment (requests go to the URL as given), and the key, the value of every header
passed (``X-Goog-Api-Key``, ``Cookie``, ...), the userinfo, the query's values and
any ``Authorization`` value are cut out of what an error quotes of an answer (a
proxy may echo the request in its error page). ``close`` lets the sync calls under
way end: the old client closes when the last of them does. httpx is imported when
the first client object is built, never by ``import memlane``.

The retry loop is memlane's own, not tenacity's: it is one decision
(``_verdict``, shared by the sync and async paths) and two short loops. With
tenacity the same needs a retry predicate over responses and exceptions, a wait
callback that reads ``Retry-After`` from the last outcome, unwrapping its
``RetryError`` into ``_error`` and its own sync and async retryers: as much
code, plus a dependency.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import urlsplit, urlunsplit

from memlane import json_depth
from memlane.errors import InvalidArgumentError, MemlaneError, shown

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_ANSWER", "MAX_WAIT", "RETRY_STATUS", "OpenAIHTTPClient", "json_body"]

#: Statuses worth another try: the server is busy, overloaded or briefly broken.
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
#: The longest wait between tries, in seconds, whatever ``Retry-After`` asks.
MAX_WAIT = 30.0
#: The most bytes an answer may take when its size cannot be foreseen (a chat reply):
#: far more than any reply a model writes, far less than what would strain memory.
MAX_ANSWER = 32 * 2**20

# What an error reads of a failed answer's body, and the characters it quotes: the read
# is much longer than the quote so that a secret is cut out whole before the quote is cut.
_ERROR_BODY = 64 * 2**10
_QUOTED = 300
# Shorter strings are no secret (``api_key="x"`` for a local server) and cutting them
# out would mangle ordinary words; an echoed Authorization value goes by _AUTH_VALUE.
_SECRET_MIN = 8
# What parts a header value into pieces an echo may quote alone: "Bearer KEY", a
# cookie's "name=value; other=value", a list "a, b".
_SECRET_PARTS = re.compile(r"[\s;,=]+")
# An Authorization value as a header line or a JSON or form field writes it.
_AUTH_VALUE = re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)[^\"'\r\n]*")
_REDACTED = "[redacted]"

# The waits between tries; tests replace them to see the waits without waiting.
_sleep = time.sleep
_asleep = asyncio.sleep


def json_body(value: Any, what: str) -> bytes:
    """``value`` as the UTF-8 JSON text of a request, or ``InvalidArgumentError`` naming
    ``what`` and why it cannot be sent: a NaN or an infinity (not JSON), a lone surrogate
    (not UTF-8), an object JSON has no form for, nesting too deep to write."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False).encode()
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{what} holds a lone surrogate ({shown(e.object[e.start : e.end])}), "
            "which is not valid Unicode"
        ) from None
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidArgumentError(f"{what} cannot be sent as JSON: {e}") from None


def _header_text(value: object) -> bool:
    # httpx writes header values as ASCII, and a line break would end the header.
    return isinstance(value, str) and value.isascii() and value.isprintable()


class _Answer:
    """One try's answer: its status, headers and body as it streams in, kept up to
    ``limit`` bytes (the cap when it succeeded, else what an error can quote); or, when
    the body is compressed (``coding`` names how), none of it."""

    def __init__(self, response: httpx.Response, cap: int) -> None:
        self.status = response.status_code
        self.headers = response.headers
        self.limit = cap if self.status < 300 else _ERROR_BODY
        self.body = bytearray()
        self.whole = True
        # The body is read raw, never inflated: httpx inflates each piece whole before a
        # cap could stop it, so a compressed one (asked for none) is left unread.
        codings = response.headers.get("content-encoding", "").lower().split(",")
        self.coding = ", ".join(c.strip() for c in codings if c.strip() not in ("", "identity"))

    def take(self, chunk: bytes) -> bool:
        """Keep ``chunk``; False once the body is past the limit, when reading stops."""
        self.body += chunk
        self.whole = len(self.body) <= self.limit
        return self.whole


class OpenAIHTTPClient:
    """Base of the clients of an OpenAI-compatible API (see the module's doc).

    Subclasses set ``_error`` to the exception they raise and call
    ``_post_json`` / ``_apost_json`` with a path under ``base_url``.
    """

    _error: ClassVar[type[MemlaneError]] = MemlaneError

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None,
        timeout: float,
        max_retries: int,
        backoff: float,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError("model must be a non-empty str")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be an int >= 0, got {shown(max_retries)}")
        for label, x in (("backoff", backoff), ("timeout", timeout)):
            if not (isinstance(x, int | float) and math.isfinite(x) and x >= 0):
                raise InvalidArgumentError(f"{label} must be a number >= 0, got {shown(x)}")
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - httpx is a dependency
            raise self._error(
                f"httpx is not installed ({e}); install it with: pip install httpx"
            ) from None
        self._httpx = httpx
        self.model = model
        url = _checked_url(httpx, base_url)
        # Requests go to the URL as given (httpx sends its userinfo as basic auth), each
        # path put before its query; what reprs and messages show, base_url, is the URL
        # without its userinfo, query and fragment, any of which may hold a credential.
        self._parts = urlsplit(base_url)
        self.base_url = _shown_url(base_url)
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if key is not None and not _header_text(key):
            # The key itself stays out of the message: it is a secret.
            label = "api_key" if api_key is not None else "$OPENAI_API_KEY"
            raise InvalidArgumentError(f"{label} must be a str of printable ASCII characters")
        given = _checked_headers(headers)
        # identity: an answer as it is, never compressed (see _Answer).
        self._headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        self._headers |= given
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        # Any header passed may carry a credential (X-Goog-Api-Key, Cookie, ...).
        self._secrets = _secrets([*given.values(), *([key] if key else [])], url)
        self._client: httpx.Client | None = None
        # The sync clients with calls under way, and how many: close() leaves each to
        # the last of its calls to close.
        self._calls: dict[httpx.Client, int] = {}
        self._aclients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._lock = threading.Lock()

    # -- requests ---------------------------------------------------------------------------

    def _post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        cap: int = MAX_ANSWER,
        values: int | None = None,
    ) -> Any:
        """POST ``body`` to ``{base_url}/{path}`` and return the decoded JSON answer, which
        may take ``cap`` bytes and hold ``values`` JSON values (counted by their commas,
        when given) at most."""
        content = json_body(body, "the request")
        url = self._endpoint(path)
        attempt = 0
        while True:
            try:
                outcome: _Answer | Exception = self._try(url, content, cap)
            # RuntimeError: httpx's "the client has been closed", were the sync client
            # closed under a call (close() itself waits for the calls under way).
            except (self._httpx.HTTPError, RuntimeError) as e:
                outcome = e
            verdict = self._verdict(path, attempt, outcome)
            if not isinstance(verdict, float):
                return self._decode(path, verdict, values)
            _sleep(verdict)
            attempt += 1

    async def _apost_json(
        self,
        path: str,
        body: Mapping[str, Any],
        cap: int = MAX_ANSWER,
        values: int | None = None,
    ) -> Any:
        """The async form of ``_post_json``."""
        content = json_body(body, "the request")
        url = self._endpoint(path)
        attempt = 0
        while True:
            try:
                outcome: _Answer | Exception = await self._atry(url, content, cap)
            # RuntimeError: httpx's "the client has been closed" (an aclose() raced the
            # call) or asyncio's "Event loop is closed"; the next try takes the running
            # loop's client afresh.
            except (self._httpx.HTTPError, RuntimeError) as e:
                outcome = e
            verdict = self._verdict(path, attempt, outcome)
            if not isinstance(verdict, float):
                return self._decode(path, verdict, values)
            await _asleep(verdict)
            attempt += 1

    def _endpoint(self, path: str) -> str:
        """The URL a request to ``path`` goes to: base_url as given, ``path`` appended."""
        scheme, netloc, root, query, _ = self._parts
        return urlunsplit((scheme, netloc, f"{root.rstrip('/')}/{path}", query, ""))

    def _try(self, url: str, content: bytes, cap: int) -> _Answer:
        """One POST, its answer read as it streams in; each connect, read and write of
        it waits no later than its deadline (``_Clipped``)."""
        client = self._lease()
        deadline = _deadline.at = time.monotonic() + self.timeout
        try:
            with client.stream("POST", url, content=content) as response:
                answer = _Answer(response, cap)
                if not answer.coding:
                    for chunk in response.iter_raw():
                        if not answer.take(chunk):
                            break
        except self._httpx.TimeoutException:
            # Each wait was cut to the deadline: the try timed out as a whole, as an async
            # one does, whichever wait was the last.
            if time.monotonic() < deadline:
                raise
            raise self._late() from None
        finally:
            _deadline.at = math.inf
            self._release(client)
        return answer

    async def _atry(self, url: str, content: bytes, cap: int) -> _Answer:
        """The async form of ``_try``: the whole try under the deadline."""
        client = self._async_client()
        try:
            async with (
                asyncio.timeout(self.timeout),
                client.stream("POST", url, content=content) as response,
            ):
                answer = _Answer(response, cap)
                if not answer.coding:
                    async for chunk in response.aiter_raw():
                        if not answer.take(chunk):
                            break
        except TimeoutError:
            raise self._late() from None
        return answer

    def _late(self) -> Exception:
        # An httpx timeout, so that a late answer is retried like any other timeout.
        return self._httpx.TimeoutException(
            f"no complete answer within the timeout ({self.timeout:g} s)"
        )

    def _lease(self) -> httpx.Client:
        """The sync client, for one try, counted among its calls under way until
        ``_release``; opened here when there is none."""
        with self._lock:
            if self._client is None:
                self._client = self._sync_client()
            client = self._client
            self._calls[client] = self._calls.get(client, 0) + 1
        return client

    def _release(self, client: httpx.Client) -> None:
        """The end of a try on ``client``: the last one closes it if close() retired it."""
        with self._lock:
            self._calls[client] -= 1
            if self._calls[client]:
                return
            del self._calls[client]
            if client is self._client:
                return
        client.close()

    def _sync_client(self) -> httpx.Client:
        """A new httpx.Client whose connections wait no later than the deadline of the
        sync try using them."""
        import httpcore  # httpx's own dependency

        client = self._httpx.Client(timeout=self.timeout, headers=self._headers)
        # httpx has no option for the network backend of its connection pools (httpcore's,
        # a public interface), so it is set on each pool here: the transport's, and those
        # of proxies taken from the environment. httpx>=0.27,<1 all have this shape; one
        # that does not leaves httpx's own timeouts, each read's (the deadline tests fail
        # then, not the calls).
        transports: list[Any] = [client._transport, *getattr(client, "_mounts", {}).values()]
        for transport in transports:
            pool = getattr(transport, "_pool", None)
            inner = getattr(pool, "_network_backend", None)
            if inner is not None:
                pool._network_backend = _Clipped(inner, httpcore.TimeoutException)  # type: ignore[union-attr]
        return client

    def _async_client(self) -> httpx.AsyncClient:
        """The running loop's client. An httpx.AsyncClient's connections belong to the
        loop that opened them (on another one they fail: "Event loop is closed"), so each
        loop has its own; those of loops since closed are dropped, and their sockets
        close when collected (nothing can await a closed loop's transports)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._forget_closed_loops()
            client = self._aclients.get(loop)
            if client is None:
                client = self._httpx.AsyncClient(timeout=self.timeout, headers=self._headers)
                self._aclients[loop] = client
            return client

    def _verdict(self, path: str, attempt: int, outcome: _Answer | Exception) -> _Answer | float:
        """After try ``attempt`` (from 0) ended in ``outcome``: the answer if it
        succeeded, the seconds to wait before the next try if there is one, else
        raises ``_error``."""
        url = f"{self.base_url}/{path}"
        if isinstance(outcome, Exception):
            why, again = self._redacted(f"{type(outcome).__name__}: {outcome}"), True
        elif outcome.status < 300:
            if outcome.coding:
                raise self._error(
                    f"{url} answered compressed ({shown(outcome.coding)}), though asked for "
                    "an uncompressed answer (Accept-Encoding: identity); refused unread"
                )
            if outcome.whole:
                return outcome
            raise self._error(
                f"{url} answered with more than {outcome.limit} bytes, the most this "
                "request's answer may take; refused"
            )
        else:
            if outcome.coding:
                text = f"(a body compressed with {shown(outcome.coding)}, not read)"
            else:
                text = self._redacted(outcome.body.decode("utf-8", "replace"))
            why = f"HTTP {outcome.status}: {text[:_QUOTED]}"
            again = outcome.status in RETRY_STATUS
        if not again or attempt >= self.max_retries:
            raise self._error(
                f"{url} (model {self.model!r}) failed after {attempt + 1} attempt(s): {why}"
            )
        asked = None if isinstance(outcome, Exception) else _retry_after(outcome)
        if asked is not None:
            return min(max(asked, 0.0), MAX_WAIT)
        return min(self.backoff * 2.0 ** min(attempt, 64), MAX_WAIT)

    def _decode(self, path: str, answer: _Answer, values: int | None) -> Any:
        url = f"{self.base_url}/{path}"
        # Counted before decoding: json.loads makes a Python object of every value, 32
        # bytes of memory for the 4 of "0.1," (a 100 MB answer took 1.2 GB).
        if values is not None and answer.body.count(b",") >= values:
            raise self._error(
                f"{url} answered with more than {values} JSON values, the most this "
                "request's answer may hold; refused"
            )
        try:
            return json_depth.loads(answer.body)
        except ValueError as e:
            raise self._error(f"{url} returned a body that is not JSON: {e}") from None
        except RecursionError:
            raise self._error(f"{url} returned JSON nested too deeply to read") from None

    def _redacted(self, text: str) -> str:
        """``text`` (an answer or an error quoted in a message) without the credentials."""
        for secret in self._secrets:
            text = text.replace(secret, _REDACTED)
        return _AUTH_VALUE.sub(rf"\1{_REDACTED}", text)

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the sync connections, each once the calls using it end (closing one
        under a call would fail it); a later call opens new ones."""
        with self._lock:
            client, self._client = self._client, None
            if client is None or client in self._calls:
                return  # nothing open, or left to the last of its calls (_release)
        client.close()

    async def aclose(self) -> None:
        """Close the async connections of the running event loop (and forget those of
        loops since closed); a later call opens new ones."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._aclients.pop(loop, None)
            self._forget_closed_loops()
        if client is not None:
            await client.aclose()

    def _forget_closed_loops(self) -> None:
        """Drop the async clients of loops since closed (under ``_lock``): so many
        asyncio.run calls in turn leave one client, not one each."""
        for gone in [loop for loop in self._aclients if loop.is_closed()]:
            del self._aclients[gone]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
        self.close()


def _checked_url(lib: Any, base_url: object) -> httpx.URL:
    """``base_url`` parsed by ``lib`` (httpx), or ``InvalidArgumentError`` unless it is an
    http(s) URL."""
    if not isinstance(base_url, str):
        raise InvalidArgumentError(f"base_url must be a str, got {type(base_url).__name__}")
    try:
        url: httpx.URL = lib.URL(base_url)
    except lib.InvalidURL as e:
        raise InvalidArgumentError(f"base_url is not a URL: {e}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise InvalidArgumentError(
            f"base_url must be an http(s) URL, got {shown(_shown_url(base_url))}"
        )
    return url


def _shown_url(base_url: str) -> str:
    """``base_url`` as messages show it: without its userinfo, query and fragment."""
    scheme, netloc, path, _, _ = urlsplit(base_url)
    return urlunsplit((scheme, netloc.rpartition("@")[2], path, "", "")).rstrip("/")


def _checked_headers(headers: object) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidArgumentError(f"headers must be a dict, got {type(headers).__name__}")
    for name, value in headers.items():
        if not _header_text(name) or not name or any(c in name for c in ": "):
            raise InvalidArgumentError(f"header name {shown(name)} is not a valid header name")
        if not _header_text(value):
            # Not the value: it may be a credential.
            raise InvalidArgumentError(f"headers[{name!r}] must be a str of printable ASCII")
    return dict(headers)


def _secrets(values: Iterable[str], url: httpx.URL) -> list[str]:
    """What a message must not show: the header ``values`` (and their pieces: the token
    without the scheme, a cookie's value), the URL's userinfo in each form it may be
    echoed in, and the values of its query, as written and decoded."""
    found = set()
    for value in values:
        found |= {value, *_SECRET_PARTS.split(value)}
    for piece in url.query.decode().split("&"):
        found.add(piece.partition("=")[2] or piece)
    found |= {value for _, value in url.params.multi_items()}
    if url.userinfo:
        userpass = f"{url.username}:{url.password}"
        basic = base64.b64encode(userpass.encode()).decode()
        found |= {url.userinfo.decode(), url.username, url.password, userpass, basic}
    # The longest first, so that a secret holding another is cut out whole.
    return sorted((s for s in found if len(s) >= _SECRET_MIN), key=len, reverse=True)


def _retry_after(answer: _Answer) -> float | None:
    """The answer's ``Retry-After`` when it is a number of seconds (not an HTTP date)."""
    try:
        seconds = float(answer.headers["retry-after"])
    except (KeyError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None


# -- the sync deadline ----------------------------------------------------------------------


class _Deadline(threading.local):
    """The monotonic time by which the sync try running in this thread must end."""

    at = math.inf


_deadline = _Deadline()
# Writes go in pieces of this many bytes, so that a slow reader holds one past the
# deadline by a piece at most: httpcore's write waits up to the timeout it is given again
# for each part of its buffer the reader takes.
_WRITE_PIECE = 2**14


def _clipped(timeout: float | None, late: type[Exception]) -> float | None:
    """``timeout`` (an httpx wait for one network operation), cut to what is left
    before this thread's deadline; or ``late`` (httpcore's timeout, which httpx maps to
    its own) raised once it has passed."""
    left = _deadline.at - time.monotonic()
    if left <= 0:
        raise late()
    return left if timeout is None else min(timeout, left)


class _Clipped:
    """An httpcore network backend (a public httpcore interface) over another, whose
    streams' every wait ends by the deadline of the sync try in their thread: a try's
    network work all runs in its own thread, so no other thread's request is touched (a
    watchdog closing a try's socket would need it before the headers come, which httpx
    does not give). It has what httpx's pools call: not ``connect_unix_socket`` nor
    ``sleep``, for options memlane leaves unset (``uds``, ``retries``)."""

    def __init__(self, inner: Any, late: type[Exception]) -> None:
        self._inner = inner
        self._late = late

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> _ClippedStream:
        wait = _clipped(timeout, self._late)
        stream = self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return _ClippedStream(stream, self._late)


class _ClippedStream:
    """A network stream of ``_Clipped``."""

    def __init__(self, inner: Any, late: type[Exception]) -> None:
        self._inner = inner
        self._late = late

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._inner.read(max_bytes, _clipped(timeout, self._late))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), _WRITE_PIECE):
            piece = buffer[start : start + _WRITE_PIECE]
            self._inner.write(piece, _clipped(timeout, self._late))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _ClippedStream:
        wait = _clipped(timeout, self._late)
        return _ClippedStream(self._inner.start_tls(ssl_context, server_hostname, wait), self._late)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
