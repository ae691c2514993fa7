"""A TCP proxy in front of a test server that can freeze: it keeps every connection
open and accepts new ones, but passes no byte either way, as a server that stopped
answering does (a SIGSTOPped postmaster, a frozen VM). It can also hold only the
connections open so far, passing new ones through, as a network that lost a flow's
state does (a firewall, a NAT, a failover). The client's kernel still acknowledges what
it sends, so nothing at the TCP level tells the client the peer is gone."""

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
        self._opened = 0  # connections accepted so far
        self._held_below = 0  # those numbered below this pass nothing
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="frozen-proxy").start()

    def freeze(self) -> None:
        self._frozen.set()

    def thaw(self) -> None:
        self._frozen.clear()

    def hold_open_ones(self) -> None:
        """The connections open now pass nothing from now on; new ones pass."""
        with self._lock:
            self._held_below = self._opened

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
            with self._lock:
                number = self._opened
                self._opened += 1
            threading.Thread(target=self._pipe, args=(client, number), daemon=True).start()

    def _pipe(self, client: socket.socket, number: int) -> None:
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
                if self._frozen.is_set() or number < self._held_below:
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
