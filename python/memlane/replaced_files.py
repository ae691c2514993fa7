"""What a file written beside another and renamed over it needs to stand in for it
(JSONL export, notes files, daily logs): the old file's owner and permissions, and the
folder synced so that the rename survives a power cut."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path

__all__ = ["keep_owner", "sync_folder"]


def keep_owner(fd: int, was: os.stat_result) -> None:
    """Gives the new file ``fd`` the replaced one's owner, where this process may, and its
    permission bits (after the owner: a change of owner clears set-id bits), before
    anything is written into it: a private file (0600) stays private. Windows has
    neither call before Python 3.13, nor these permissions (a new file there inherits
    the folder's)."""
    if sys.platform == "win32":
        return
    with contextlib.suppress(OSError):
        os.fchown(fd, was.st_uid, was.st_gid)
    os.fchmod(fd, stat.S_IMODE(was.st_mode))


def sync_folder(folder: Path) -> None:
    """Syncs ``folder`` to disk, so that files renamed into it survive a power cut under
    their new names; where a platform or file system cannot sync a directory, the files
    are on disk and only their names may not survive."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
