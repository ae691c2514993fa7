"""AsyncMemory has Memory's signatures: the same parameters, kinds, defaults and types for
every method, every argument passed on to the synchronous method, and a misspelt keyword
refused by Python at run time and by mypy --strict before it."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

import memlane.memory
import memlane.records
from conftest import TESTS, WordHashEmbedder
from memlane import AsyncMemory, Memory
from memlane.records import SCOPE_FIELDS
from memlane.scoping import ScopeFields

#: Memory methods without an async twin, and why. No public method is sync-only.
SYNC_ONLY: dict[str, str] = {
    "__enter__": "AsyncMemory is entered with `async with` (__aenter__)",
    "__exit__": "`async with` closes through `await close()` (__aexit__)",
    "__contains__": "`in` cannot await the database read; `await mem.get(id)` can",
}
#: AsyncMemory methods without a Memory twin, and why.
ASYNC_ONLY: dict[str, str] = {
    "open": "opens the Memory in a worker thread; the sync side is the constructor",
}
#: Memory methods that take the scope fields as keyword-only parameters.
SCOPED = (
    "add",
    "replace",
    "delete_all",
    "prune",
    "evict",
    "count",
    "list",
    "search",
    "export_notes",
    "import_notes",
)


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}


def _described(fn: Callable[..., Any]) -> tuple[list[tuple[str, Any, Any, Any]], Any]:
    """The parameters after ``self`` (name, kind, default, type) and the return type,
    with the annotations evaluated, so ``list`` and ``builtins.list`` are the same type.
    The knowledge methods name Memory and the records only for type checkers."""
    names = {**vars(memlane.records), **vars(memlane.memory), **inspect.unwrap(fn).__globals__}
    sig = inspect.signature(fn, eval_str=True, globals=names)
    params = list(sig.parameters.values())[1:]
    return [(p.name, p.kind, p.default, p.annotation) for p in params], sig.return_annotation


def test_every_public_method_has_an_async_twin() -> None:
    sync, run = _public(Memory), _public(AsyncMemory)
    assert sync - run == {n for n in SYNC_ONLY if not n.startswith("_")}
    assert run - sync == set(ASYNC_ONLY)
    for name in SYNC_ONLY:
        assert hasattr(Memory, name) and not hasattr(AsyncMemory, name), name


@pytest.mark.parametrize("name", sorted(_public(Memory) - set(SYNC_ONLY)))
def test_async_twin_has_the_same_signature(name: str) -> None:
    twin = getattr(AsyncMemory, name)
    assert inspect.iscoroutinefunction(twin), f"AsyncMemory.{name} is not async"
    params, returns = _described(getattr(Memory, name))
    twin_params, twin_returns = _described(twin)
    assert twin_params == params
    assert twin_returns == returns
    assert twin.__doc__ and f"Memory.{name}" in twin.__doc__


class _Recorder:
    """Stands in for the Memory: records each call instead of making it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))

        return record


@pytest.mark.parametrize("name", sorted(_public(Memory) - set(SYNC_ONLY)))
def test_async_twin_passes_every_argument_on(name: str) -> None:
    """Each parameter gets a value of its own, never its default; the sync method must
    receive every one (a forgotten argument would silently fall back to the default)."""
    sig = inspect.signature(getattr(Memory, name))
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in list(sig.parameters.values())[1:]:
        value: Any = object()
        if p.annotation.startswith("Iterable"):
            value = [{"text": object()}]  # read into a new list: compared by equality
        if p.kind is p.VAR_KEYWORD:
            kwargs["some_option"] = value
        elif p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
    recorder = _Recorder()
    mem = AsyncMemory(memory=cast(Memory, recorder))
    asyncio.run(getattr(mem, name)(*args, **kwargs))
    [(called, got_args, got_kwargs)] = recorder.calls
    assert called == name
    expected = sig.bind(None, *args, **kwargs).arguments
    assert sig.bind(None, *got_args, **got_kwargs).arguments == expected


@pytest.mark.parametrize("name", SCOPED)
def test_scope_fields_are_one_typed_keyword_group(name: str) -> None:
    """The scope keywords are declared once (``ScopeFields``) and taken as
    ``**scope: Unpack[ScopeFields]``, which mypy and an IDE read as the six keywords."""
    assert tuple(ScopeFields.__annotations__) == SCOPE_FIELDS
    for cls in (Memory, AsyncMemory):
        params = inspect.signature(getattr(cls, name)).parameters
        scope = params["scope"]
        assert scope.kind is inspect.Parameter.VAR_KEYWORD, (cls, name)
        assert scope.annotation == "Unpack[ScopeFields]", (cls, name)
        assert not set(SCOPE_FIELDS) & set(params), (cls, name)


def test_only_search_knowledge_takes_arbitrary_keywords() -> None:
    """No method swallows unknown keywords (``**scope`` takes the scope keywords
    alone), except search_knowledge and search_documents, which pass their options to
    Memory.search (where a misspelt one is a TypeError)."""
    for cls in (Memory, AsyncMemory):
        takes_any = {
            name
            for name in _public(cls)
            if any(
                p.kind is p.VAR_KEYWORD and p.annotation != "Unpack[ScopeFields]"
                for p in inspect.signature(getattr(cls, name)).parameters.values()
            )
        }
        expected = {"search_knowledge", "search_documents", "open"} & _public(cls)
        assert takes_any == expected, cls


def test_a_misspelt_scope_keyword_is_a_type_error() -> None:
    with Memory(None, WordHashEmbedder()) as mem:
        mem.add("hello world", agent_id="a")
        with pytest.raises(TypeError, match="agnet_id"):
            mem.search("hello", agnet_id="a")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="agnet_id"):
            mem.add("hello again", agnet_id="a")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="usr_id"):
            mem.list(usr_id="u")  # type: ignore[call-arg]
        assert len(mem) == 1

    async def main() -> None:
        async with AsyncMemory(None, WordHashEmbedder()) as amem:
            await amem.add("hello world", agent_id="a")
            with pytest.raises(TypeError, match="agnet_id"):
                await amem.search("hello", agnet_id="a")  # type: ignore[call-arg]
            with pytest.raises(TypeError, match="agnet_id"):
                await amem.add("hello again", agnet_id="a")  # type: ignore[call-arg]
            with pytest.raises(TypeError, match="usr_id"):
                await amem.list(usr_id="u")  # type: ignore[call-arg]
            assert len(amem) == 1
            assert [h.record.agent_id for h in await amem.search("hello", agent_id="a")] == ["a"]

    asyncio.run(main())


def test_mypy_rejects_a_misspelt_keyword(tmp_path: Path) -> None:
    """mypy --strict reports each call marked ``# expect: call-arg`` in
    typecheck/check_signatures.py, and nothing else there."""
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (the dev extra has it)")
    tests = TESTS
    checked = tests / "typecheck" / "check_signatures.py"
    marked = {
        n
        for n, line in enumerate(checked.read_text().splitlines(), 1)
        if line.endswith("# expect: call-arg")
    }
    assert len(marked) >= 6
    out, err, status = api.run(
        [
            str(checked),
            "--config-file",
            str(tests.parent / "pyproject.toml"),
            "--strict",
            "--show-error-codes",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
        ]
    )
    errors = [
        (int(m[1]), m[2], m[3])
        for m in re.finditer(r"check_signatures\.py:(\d+): error: (.*?)  \[([\w-]+)\]", out)
    ]
    assert status == 1, out + err
    assert {line for line, _, _ in errors} == marked, out
    for _line, message, code in errors:
        assert code == "call-arg" and message.startswith("Unexpected keyword argument"), out
