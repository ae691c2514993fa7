"""A holder that belongs to another user, under a ``/proc`` mounted ``hidepid=2``: its pid
answers ``kill(pid, 0)`` with EPERM, but ``/proc`` does not show its start time. It was
taken for gone while it ran (its job or fact check taken over beside it); its lease
decides now, as for a holder on another host."""

from __future__ import annotations

import ctypes
import os
import sys
import time

import pytest

from memlane.agent.holder import Holder

# Linux's unshare(2) and mount(2) flags.
CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x20000, 0x4000, 0x40000
NOBODY = 65534


def _gone_as_nobody(holders: list[Holder]) -> str:
    """Whether each holder is gone, as a child sees it that runs as another user under a
    ``/proc`` of its own mounted ``hidepid=2`` (forked: memlane is loaded already, so the
    child reads no file of the install, which another user may not read)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        code = 3
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            # A mount namespace of its own whose mounts reach no other.
            if (
                libc.unshare(CLONE_NEWNS) == 0
                and libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
                and libc.mount(b"proc", b"/proc", b"proc", 0, b"hidepid=2") == 0
            ):
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                now = time.time()
                os.write(w, " ".join(str(h.gone(frozenset(), now)) for h in holders).encode())
                code = 0
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(child, 0)
    with os.fdopen(r, "rb") as f:
        said = f.read().decode()
    if os.waitstatus_to_exitcode(status) == 3:
        pytest.skip("a /proc of its own cannot be mounted here")
    assert os.waitstatus_to_exitcode(status) == 0
    return said


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="needs root on Linux")
def test_a_hidden_holder_is_gone_only_once_its_lease_passed() -> None:
    me = Holder.here("t", time.time() + 600)
    assert me.started  # the holder: this process, root's
    holders = [
        Holder(me.host, me.pid, me.started, "t", time.time() + 600),
        Holder(me.host, me.pid, me.started, "t", time.time() - 1),
        Holder(me.host, 2**22 + 1, me.started, "t", time.time() + 600),  # past pid_max
    ]
    # Alive within its lease; gone once it passed; a pid that names no process, gone.
    assert _gone_as_nobody(holders).split() == ["False", "True", "True"]
