"""A throwaway PostgreSQL cluster for tests and benchmarks.

``PgServer`` runs ``initdb`` in a temporary folder, starts the server on a free
loopback port and removes everything at ``stop()``. The binaries come from
``$MEMLANE_PG_BIN``, else ``initdb`` on ``PATH``, else the newest
``/usr/lib/postgresql/*/bin`` (Debian's layout). PostgreSQL refuses to run as
root, so under root the cluster belongs to an unprivileged user
(``$MEMLANE_PG_USER``, else ``postgres``, else ``nobody``).

Clients log in over TCP with a password (scram-sha-256), so tests see real
credentials travel through memlane.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["PASSWORD", "USER", "PgServer", "find_pg_bin"]

USER = "memlane"
# Never a real secret: tests assert that it appears in no message, log or repr.
PASSWORD = "pw-Sekret-7f3a"


def find_pg_bin() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    env = os.environ.get("MEMLANE_PG_BIN")
    if env:
        return Path(env) if (Path(env) / "initdb").is_file() else None
    found = shutil.which("initdb")
    if found:
        # A symlink on PATH: pg_ctl and postgres are beside the real file.
        return Path(found).resolve().parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return candidates[-1].parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _owner() -> pwd.struct_passwd | None:
    """The account the cluster runs as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in (os.environ.get("MEMLANE_PG_USER"), "postgres", "nobody"):
        if not name:
            continue
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and no unprivileged account to own the cluster")


class PgServer:
    def __init__(self, bin_dir: Path, *, durable: bool = False) -> None:
        self.bin = bin_dir
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="memlane-pg-"))
        self.data = self.root / "data"
        self.durable = durable
        self._owner = _owner()
        self._started = False

    def _as_owner(self) -> Callable[[], None] | None:
        owner = self._owner
        if owner is None:
            return None

        def drop() -> None:
            os.setgid(owner.pw_gid)
            os.setuid(owner.pw_uid)

        return drop

    def _run(self, *args: str) -> None:
        out = subprocess.run(
            args,
            capture_output=True,
            text=True,
            preexec_fn=self._as_owner(),
            cwd=self.root,
            timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {out.stdout}\n{out.stderr}")

    def start(self) -> PgServer:
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._owner is not None:
            os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
            os.chown(pwfile, self._owner.pw_uid, self._owner.pw_gid)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-locale",
        )
        pwfile.unlink()
        options = [
            f"-p {self.port}",
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={self.root}",
            "-c max_connections=300",
        ]
        if not self.durable:
            # Tests kill clients, never the server: its own durability is not under test.
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            " ".join(options),
            "-w",
            "start",
        )
        self._started = True
        return self

    def restart(self) -> None:
        """Stops the server (dropping every connection) and starts it again."""
        log = str(self.root / "log")  # else the server keeps our output pipe open
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", log, "-m", "fast", "-w", "restart"
        )

    def url(self, database: str = "postgres", **query: str) -> str:
        tail = "&".join(f"{k}={v}" for k, v in query.items())
        base = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"
        return base + ("?" + tail if tail else "")

    def stop(self) -> None:
        if self._started:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
            self._started = False
        shutil.rmtree(self.root, ignore_errors=True)
