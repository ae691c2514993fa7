"""What a server without API keys answers: requests made to a loopback address, by
programs on the machine, and never a web page of another origin.

Without keys, anything that reaches the port may do everything, and the command serves
only on loopback so that only the machine's own programs can. A browser on the machine
reaches loopback too, on behalf of any page it shows:

- a page of another origin may send a request a browser does not ask leave for (a POST
  whose body is "text/plain"): the server reads it as JSON, so that page could add or
  delete memories. Such a request carries the page's ``Origin``, which must be this
  server's own;
- a page whose host name its owner points at 127.0.0.1 (DNS rebinding) is of the same
  origin as the server in the browser's eyes, and may read the answers too. Its requests
  carry that name in ``Host``, which must be a loopback name or address.

A server with keys needs neither: a browser does not send a page's requests with a key
the page does not know.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["refusal"]


def refusal(headers: Mapping[str, str]) -> str | None:
    """Why a server without keys refuses a request with these headers (None: it may be
    answered)."""
    host = headers.get("host")
    if host is not None and not _loopback(_name(host)):
        return f"this server has no API key and answers only at a loopback address, not {host!r}"
    origin = headers.get("origin")
    if origin is not None and (host is None or not _same(origin, host)):
        return f"this server has no API key and answers no web page of another origin ({origin!r})"
    return None


def _name(host: str) -> str:
    """The name or address of a ``Host`` header (its port left out)."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 address: "[::1]:8765"
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _same(origin: str, host: str) -> bool:
    """Whether a page of ``origin`` is this server's own (the inspector's): its host and
    port are those the request was sent to."""
    try:
        page = urlsplit(origin.strip())
        sent = urlsplit("//" + host.strip())
        if page.scheme not in ("http", "https") or not page.hostname:
            return False
        default = 443 if page.scheme == "https" else 80
        return (page.hostname, page.port or default) == (sent.hostname, sent.port or default)
    except ValueError:  # a port that is no number
        return False
