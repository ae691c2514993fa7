"""``memlane serve``: a store's record API over HTTP/JSON (``pip install 'memlane[server]'``).

Built on Starlette and uvicorn rather than FastAPI. Both are what the ``mcp`` extra
already installs, and Starlette is the layer FastAPI itself runs on; what FastAPI would
add is request models (pydantic) that check a body before the handler runs. memlane
checks every argument itself (``coerce``, the engine's filter parser) and names the
problem in a memlane error, so a second set of models would say the same thing twice and
could drift from the first. The OpenAPI schema FastAPI derives from those models is
derived here from the ``Memory`` methods each route calls
(``memlane.server.openapi``), so it is generated from the code all the same.

Modules: ``app`` (the ASGI app), ``records`` (the record routes), ``transfer`` (ingest,
export, import), ``stream`` (change events as Server-Sent Events), ``keys`` (API keys and
their scopes), ``calls`` (a request's arguments, a result's JSON), ``errors`` (one JSON
shape for every failure), ``limits`` (the body size limit), ``connections`` (the heads and
connections uvicorn leaves unbounded), ``openapi``.
"""

from __future__ import annotations

from memlane.server.app import create_app
from memlane.server.keys import ApiKey, load_keys

__all__ = ["ApiKey", "create_app", "load_keys"]
