"""A Griffe extension (mkdocs.yml) so that the API reference shows what the code does at
run time where reading the source alone cannot:

- a default that names a constant (``rrf_k=_core.DEFAULT_RRF_K``, ``batch_size=BATCH_SIZE``)
  shows the constant's value, read from the imported module, or the text ``shown_as``
  gives for a sentinel (``DEFAULT_EMBEDDER``);
- a class of the Rust extension, built by ``__new__``, shows that constructor's signature;
- ``AsyncMemory``'s methods, made at import from their ``Memory`` twins
  (``add = _in_thread(Memory.add)``, memlane/aio.py), are listed as the async methods
  they are, with the twin's signature and the docstring they have at run time.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe

# Values a signature can show as Python literals, alone or in containers.
LITERALS = (bool, int, float, str, bytes, type(None))


class Reference(griffe.Extension):
    def __init__(self, shown_as: dict[str, str] | None = None) -> None:
        super().__init__()
        # "module.NAME": the text shown for a default that is that object.
        self.shown_as = dict(shown_as or {})

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "memlane":
            return
        for func in _functions(pkg):
            _show_values(func, self.shown_as)
        _constructors(pkg)
        _async_methods(pkg)


def _functions(obj: griffe.Object) -> list[griffe.Function]:
    """Every function and method defined in ``obj`` (not those it imports)."""
    found = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Function):
            found.append(member)
        elif isinstance(member, griffe.Module | griffe.Class):
            found += _functions(member)
    return found


def _show_values(func: griffe.Function, shown_as: dict[str, str]) -> None:
    namespace: dict[str, Any] | None = None
    for param in func.parameters:
        if not isinstance(param.default, griffe.ExprName | griffe.ExprAttribute):
            continue
        if namespace is None:
            try:
                namespace = vars(importlib.import_module(func.module.path))
            except ImportError:  # an optional dependency missing: shown as written
                return
        first, *rest = str(param.default).split(".")
        if first not in namespace:  # a builtin (``dict``): shown as it is
            continue
        value = namespace[first]
        for name in rest:
            value = getattr(value, name)
        shown = next((text for path, text in shown_as.items() if _lookup(path) is value), None)
        if shown is not None:
            param.default = shown
        elif _literal(value):
            param.default = repr(value)


def _literal(value: object) -> bool:
    """Whether ``repr(value)`` is a Python literal that evaluates to ``value``."""
    if isinstance(value, LITERALS):
        return True
    if isinstance(value, tuple | list | set | frozenset):
        return all(_literal(v) for v in value)
    if isinstance(value, dict):
        return all(_literal(k) and _literal(v) for k, v in value.items())
    return False


def _constructors(obj: griffe.Object) -> None:
    """Gives a class built by ``__new__`` alone (one of the compiled ``memlane._core``,
    declared in ``_core.pyi``) an ``__init__`` with its parameters, which the class
    heading shows."""
    for member in obj.members.values():
        if member.is_alias or not isinstance(member, griffe.Module | griffe.Class):
            continue
        new = member.members.get("__new__")
        if isinstance(member, griffe.Class) and new and _opaque(member.members.get("__init__")):
            params = [
                griffe.Parameter(p.name, annotation=p.annotation, kind=p.kind, default=p.default)
                for p in list(new.parameters)[1:]
            ]
            self_ = griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
            init = griffe.Function(
                "__init__",
                lineno=new.lineno,
                endlineno=new.endlineno,
                parameters=griffe.Parameters(self_, *params),
                returns="None",
            )
            member.set_member("__init__", init)
        _constructors(member)


def _opaque(init: griffe.Object | griffe.Alias | None) -> bool:
    """Whether ``__init__`` says nothing of the arguments: absent, or ``object``'s
    ``(*args, **kwargs)`` as inspecting the compiled extension finds it."""
    if init is None:
        return True
    if not isinstance(init, griffe.Function):
        return False
    kinds = {p.kind for p in init.parameters if p.name not in ("self", "cls")}
    return kinds <= {griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword}


def _lookup(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _async_methods(pkg: griffe.Module) -> None:
    cls = pkg["aio.AsyncMemory"]
    twin = pkg["memory.Memory"]
    runtime = importlib.import_module("memlane.aio").AsyncMemory
    for name, made in vars(runtime).items():
        wrapped = getattr(made, "__wrapped__", None)
        if wrapped is None or not inspect.iscoroutinefunction(made):
            continue
        source = twin.all_members[wrapped.__name__]
        source = source.final_target if source.is_alias else source
        placeholder = cls.members[name]
        method = griffe.Function(
            name,
            lineno=placeholder.lineno,
            endlineno=placeholder.endlineno,
            parameters=griffe.Parameters(
                *(
                    griffe.Parameter(
                        p.name, annotation=p.annotation, kind=p.kind, default=p.default
                    )
                    for p in source.parameters
                )
            ),
            returns=source.returns,
        )
        method.labels.add("async")
        method.docstring = griffe.Docstring(inspect.cleandoc(made.__doc__ or ""), parent=method)
        cls.set_member(name, method)
