"""Type stubs of the native module; `python -m mypy.stubtest memlane._core` keeps them honest."""

__version__: str
