"""The ingest progress bar: it moves while fragments are embedded, with a rate and an ETA."""

from __future__ import annotations

import functools
import io
import re
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.knowledge import RecursiveCharacterSplitter
from memlane.knowledge import ingest as ingest_module
from memlane.knowledge.progress import ProgressBar

PERCENT = re.compile(r"^kb:\s+(\d+\.\d)%")


def percents(text: str) -> list[float]:
    return [float(m.group(1)) for line in text.splitlines() if (m := PERCENT.match(line))]


def test_a_batch_moves_the_bar_per_fragment() -> None:
    stream = io.StringIO()
    bar = ProgressBar(4, enabled="always", stream=stream, interval=0.0, label="kb")
    bar.update(files=1)  # an unchanged file
    bar.start_batch(2, 100)  # two files, 100 fragments to embed
    bar.update(fragments=50)
    bar.update(fragments=50)
    bar.update(files=2)  # the batch is written: no jump, it was counted already
    bar.start_batch(1, 10)
    bar.update(fragments=10)
    bar.update(fragments=10)  # embedded again (a retry): never beyond the batch's files
    bar.update(files=1)
    bar.close()
    # Drawn when the bar moves, and at close.
    assert percents(stream.getvalue()) == [0.0, 25.0, 50.0, 75.0, 100.0, 100.0]
    last = stream.getvalue().splitlines()[-1]
    assert "4/4 files, 120 fragments" in last and "files/s" in last
    assert stream.getvalue().endswith("\n")


def test_rate_and_eta_are_shown() -> None:
    stream = io.StringIO()
    bar = ProgressBar(10, enabled="always", stream=stream, interval=0.0, label="kb")
    bar.update(files=1, fragments=5)
    line = stream.getvalue().splitlines()[-1]
    # [elapsed<remaining, rate files/s, counts, fragments per second]
    assert re.search(
        r"\[\d\d:\d\d<\d\d:\d\d, [\d.]+ files/s, 1/10 files, 5 fragments [\d.]+/s\]", line
    )
    bar.close()


def test_disabled_and_non_terminal() -> None:
    stream = io.StringIO()
    bar = ProgressBar(3, enabled=True, stream=stream)  # not a terminal
    assert not bar.enabled
    bar.update(files=3, fragments=9)
    bar.close()
    assert stream.getvalue() == "" and bar.files == 3 and bar.fragments == 9
    off = ProgressBar(3, enabled=False, stream=stream)
    off.update(files=1)
    off.close()
    assert stream.getvalue() == ""


def test_ingest_shows_progress_between_0_and_100(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every update is drawn, so what the bar shows does not depend on timing.
    monkeypatch.setattr(ingest_module, "ProgressBar", functools.partial(ProgressBar, interval=0.0))
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):  # about 300 fragments: several model calls in one write batch
        paragraphs = [f"Paragraph {j} of file {i} about topic {j % 7}." for j in range(100)]
        (docs / f"f{i}.md").write_text("\n\n".join(paragraphs))
    with Memory(tmp_path / "store", WordHashEmbedder(16)) as mem:
        chunker = RecursiveCharacterSplitter(60, 0)  # one fragment per paragraph
        report = mem.ingest(docs, shared=True, progress="always", chunker=chunker)
    assert report.ok and report.fragments > 128
    err = capsys.readouterr().err
    # The bar is labelled with the folder's name.
    shown = [float(m.group(1)) for m in re.finditer(r"docs:\s+(\d+\.\d)%", err)]
    assert shown[0] == 0.0 and shown[-1] == 100.0
    assert any(0.0 < p < 100.0 for p in shown), shown
    assert shown == sorted(shown)
