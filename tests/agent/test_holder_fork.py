"""A holder names the process that holds the work by pid and start time. A forked child
reads its own start time, even when it gets the pid of the process it inherited the
read from (a pid reused after that one ended): otherwise its holder named an ended
process, and other processes took its job or lease over while it still ran."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, time
    from memlane.agent import holder
    from memlane.agent.holder import Holder

    r, w = os.pipe()
    first = os.fork()
    if first == 0:  # A: names itself a holder (its start time read), forks B, ends
        pid = Holder.here("a", time.time() + 60).pid
        if os.fork() == 0:  # B: never names itself; waits for A's pid to be free
            while os.path.exists(f"/proc/{pid}"):
                time.sleep(0.01)
            time.sleep(0.05)  # a later start, in clock ticks
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
            child = os.fork()
            if child == 0:  # C: A's pid again
                mine = Holder.here("c", time.time() + 60)
                real = holder._started(os.getpid())
                os.write(w, f"{mine.pid == pid} {mine.started} {real}".encode())
                os._exit(0)
            os.waitpid(child, 0)
        os._exit(0)
    os.waitpid(first, 0)
    print(os.read(r, 200).decode())
    """
)


def test_a_child_with_a_reused_pid_names_its_own_start() -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare here")
    # A pid namespace of its own, so that the pid to reuse can be chosen.
    ran = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ran.returncode != 0 and "Operation not permitted" in ran.stderr:
        pytest.skip("a pid namespace cannot be made here (not root)")
    assert ran.returncode == 0, ran.stderr
    reused, named, real = ran.stdout.split()
    if reused != "True":
        pytest.skip("the pid was not reused")
    assert named == real
