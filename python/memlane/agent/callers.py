"""The LLM as the triggers call it: synchronously, from a turn's worker thread with an
async model's calls run on the turn's event loop, or from the upkeep's threads with its
calls run on a loop of the upkeep's own."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from memlane.agent.llm import LLM, AsyncLLM, ChatMessage, LLMError, OpenAIChat
from memlane.errors import MemlaneError

Caller = Callable[[Sequence[ChatMessage], int | None], str]
T = TypeVar("T")


def _content(message: Mapping[str, Any], where: str) -> str:
    content = message.get("content")
    if not isinstance(content, str):
        raise LLMError(f"{where} returned no text content (got {type(content).__name__})")
    return content


def sync_caller(llm: Any) -> Caller:
    def call(messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
        if isinstance(llm, OpenAIChat) and max_tokens is not None:
            return _content(llm.chat(messages, max_tokens=max_tokens), llm.url)
        if isinstance(llm, LLM):
            return llm.complete(messages)
        raise LLMError(f"{type(llm).__name__} has no complete(); use the async calls")

    return call


def thread_caller(llm: Any, loop: asyncio.AbstractEventLoop) -> Caller:
    """Called from a worker thread: async LLM calls run on ``loop``."""
    sync = sync_caller(llm)

    def call(messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
        coro: Awaitable[Any]
        if isinstance(llm, OpenAIChat):
            opts: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
            coro = llm.achat(messages, **opts)
            msg = asyncio.run_coroutine_threadsafe(_awaited(coro), loop).result()
            return _content(msg, llm.url)
        if isinstance(llm, AsyncLLM):
            return str(
                asyncio.run_coroutine_threadsafe(_awaited(llm.acomplete(messages)), loop).result()
            )
        return sync(messages, max_tokens)

    return call


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw


class LoopThread:
    """An event loop on a daemon thread, started at the first ``run``: where the upkeep
    runs an async model's calls. A turn's loop is no place for them: with a loop per
    turn (``asyncio.run``) it is closed by the time a job runs, and a loop alive but
    not running never runs them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def run(self, aw: Awaitable[T]) -> T:
        """Runs ``aw`` on the loop and returns its result (``LLMError`` once closed)."""
        with self._lock:
            if self._closed:
                raise LLMError("the upkeep's event loop is closed")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=_serve, args=(self._loop,), name=self._name, daemon=True
                ).start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(_awaited(aw), loop).result()

    def close(self) -> None:
        """Cancels what still runs on the loop (a call past its time limit) and ends it;
        a call after this one raises."""
        with self._lock:
            self._closed = True
            loop, self._loop = self._loop, None
        if loop is not None:
            asyncio.run_coroutine_threadsafe(_shutdown(), loop)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _shutdown() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    # Cancelled, each waiting caller is told so rather than left waiting for ever.
    await asyncio.gather(*tasks, return_exceptions=True)
    asyncio.get_running_loop().stop()


def upkeep_caller(llm: Any, loop: LoopThread) -> Caller:
    """The model as the upkeep's threads call it: a model with a sync path on it (as
    ``sync_caller``), an async-only one on ``loop``, the upkeep's own."""
    if isinstance(llm, LLM) or not isinstance(llm, AsyncLLM):
        return sync_caller(llm)

    def call(messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
        return str(loop.run(llm.acomplete(messages)))

    return call


class Budgeted:
    """An ``LLM`` for ``reflect`` and ``consolidate`` over a caller."""

    def __init__(self, call: Caller, max_tokens: int | None) -> None:
        self._call = call
        self._max_tokens = max_tokens

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        return self._call(messages, self._max_tokens)


def timed(timeout: float | None) -> Callable[[Caller], Caller]:
    """Wraps callers so that each model call has ``timeout`` seconds (None: no limit).

    A sync model cannot be stopped: a call past its time goes on in a thread of its own
    and the caller gets ``LLMError``. While that call has not returned, further
    calls fail at once instead of starting another thread: a model that never answers
    holds one thread, however many calls are asked of it. One wrapper serves one
    agent's upkeep (the calls it makes share that state)."""
    lock = threading.Lock()
    stuck: list[tuple[threading.Thread, float]] = []

    def wrap(call: Caller) -> Caller:
        if timeout is None:
            return call

        def limited(messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
            with lock:
                if stuck and stuck[0][0].is_alive():
                    ago = time.monotonic() - stuck[0][1]
                    raise LLMError(
                        f"the model has not answered a call made {ago:.0f} s ago "
                        f"(upkeep_timeout={timeout:g}): no new call until it does"
                    )
                stuck.clear()
            box: list[Any] = []

            def run() -> None:
                try:
                    box.append((True, call(messages, max_tokens)))
                except BaseException as e:  # handed to the caller's thread
                    box.append((False, e))

            thread = threading.Thread(target=run, name="memlane-llm-call", daemon=True)
            started = time.monotonic()
            thread.start()
            thread.join(timeout)
            if thread.is_alive():
                with lock:
                    stuck[:] = [(thread, started)]
                raise LLMError(f"the model did not answer within {timeout:g} s (upkeep_timeout)")
            ok, value = box[0]
            if not ok:
                raise value
            # As the model gave it: what reads the answer names a non-text one.
            return cast(str, value)

        return limited

    return wrap


class Meter:
    """A caller that counts its calls and their tokens in and out (with ``count``)."""

    def __init__(self, call: Caller, count: Callable[[str], int]) -> None:
        self._call = call
        self._count = count
        self.calls = 0
        self.tokens_in = 0
        self.tokens_out = 0

    def __call__(self, messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
        self.calls += 1
        self.tokens_in += sum(self._counted(str(m.get("content") or "")) for m in messages)
        answer = self._call(messages, max_tokens)
        self.tokens_out += self._counted(answer) if isinstance(answer, str) else 0
        return answer

    def _counted(self, text: str) -> int:
        # Bookkeeping never fails a job: a text the tokenizer refuses (a model's answer
        # may hold a lone surrogate, which the answer's parse leaves out) is counted by
        # its length, as ``context.char_token_count`` counts.
        try:
            return self._count(text)
        except MemlaneError:
            return (len(text) + 3) // 4
