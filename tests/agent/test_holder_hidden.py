"""A holder that belongs to another user, under a ``/proc`` mounted ``hidepid=2``: its pid
answers ``kill(pid, 0)`` with EPERM, but ``/proc`` does not show its start time. It was
taken for gone while it ran (its job or fact check taken over beside it); its lease
decides now, as for a holder on another host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from memlane.agent.holder import Holder

# Run as another user under a /proc of its own mounted hidepid=2: whether each holder is
# gone, one line each.
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from memlane.agent.holder import Holder

    pid, started = int(sys.argv[1]), sys.argv[2]
    assert not os.path.exists(f"/proc/{pid}"), "/proc shows the holder"
    here = Holder.here("t", 0.0).host
    for until in (time.time() + 600, time.time() - 1):
        print(Holder(here, pid, started, "t", until).gone(frozenset(), time.time()))
    print(Holder(here, 2**22 + 1, started, "t", time.time() + 600).gone(frozenset(), 0.0))
    """
)


def test_a_hidden_holder_is_gone_only_once_its_lease_passed() -> None:
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if unshare is None or setpriv is None or os.geteuid() != 0:
        pytest.skip("a /proc mounted hidepid=2 for another user needs root, unshare, setpriv")
    me = Holder.here("t", time.time() + 600)
    assert me.started  # the holder: this process, root's
    as_nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    inner = [*as_nobody, sys.executable, "-c", SCRIPT, str(me.pid), me.started]
    mount = 'mount -t proc -o hidepid=2 proc /proc && exec "$@"'
    ran = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", mount, "sh", *inner],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    if ran.returncode != 0 and "permission denied" in ran.stderr.lower():
        pytest.skip(f"a /proc of its own cannot be mounted here: {ran.stderr.strip()}")
    if "ModuleNotFoundError" in ran.stderr or "PermissionError" in ran.stderr:
        pytest.skip(f"another user cannot run this install: {ran.stderr.strip()[-200:]}")
    assert ran.returncode == 0, ran.stderr
    # Alive within its lease; gone once it passed; a pid that names no process, gone.
    assert ran.stdout.split() == ["False", "True", "True"]
