"""A TCP proxy in front of a test server that can freeze: it keeps every connection
open and accepts new ones, but passes no byte either way, as a server that stopped
answering does (a SIGSTOPped postmaster, a frozen VM, a network that drops packets
past a stateful firewall). The client's kernel still acknowledges what it sends, so
nothing at the TCP level tells the client the server is gone."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class FrozenProxy:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._frozen = threading.Event()
        self._stopped = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="frozen-proxy").start()

    def freeze(self) -> None:
        self._frozen.set()

    def thaw(self) -> None:
        self._frozen.clear()

    def url(self, server_url: str) -> str:
        """``server_url`` (a ``postgresql://`` URL to 127.0.0.1) through this proxy."""
        host, port = self._target
        return server_url.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.port}/", 1)

    def _keep(self, *socks: socket.socket) -> None:
        with self._lock:
            self._sockets.extend(socks)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        while self._frozen.is_set():  # accepted, never forwarded while frozen
            if self._stopped.wait(0.05):
                return
        try:
            server = socket.create_connection(self._target)
        except OSError:
            client.close()
            return
        self._keep(server)
        other = {client: server, server: client}
        with selectors.DefaultSelector() as sel:
            sel.register(client, selectors.EVENT_READ)
            sel.register(server, selectors.EVENT_READ)
            while not self._stopped.is_set():
                if self._frozen.is_set():
                    self._stopped.wait(0.05)
                    continue
                for key, _ in sel.select(timeout=0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(65536)
                        if not data:
                            raise OSError("closed")
                        other[sock].sendall(data)
                    except OSError:
                        client.close()
                        server.close()
                        return

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
