"""``upkeep="inline"``: the step summary ``before`` writes on the turn's path keeps to
``upkeep_timeout`` like every other model call of the upkeep; a model that never
answers leaves the steps as they were and a failed compaction in the turn's report."""

from __future__ import annotations

import threading
from typing import Any

from conftest import StoreFactory, WordHashEmbedder
from memlane import AgentMemory
from memlane.agent import Compaction
from upkeep_scripts import QUIET, returns


class Hanging:
    """A model that answers nothing until the test lets it (or a minute has passed)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.answered = threading.Event()

    def complete(self, messages: Any) -> str:
        self.entered.set()
        self.release.wait(60)
        self.answered.set()
        return "a summary that came too late"


def test_an_inline_step_summary_keeps_to_upkeep_timeout(make_store: StoreFactory) -> None:
    llm = Hanging()
    mem = make_store("inline-steps", WordHashEmbedder())
    options = {**QUIET, "compaction": Compaction(max_steps=3, keep_first=1, keep_last=1)}
    am = AgentMemory(mem, llm=llm, upkeep="inline", upkeep_timeout=0.3, **options)
    ev = am.event("telegram", 42, chat_id=7)
    steps = [{"role": "assistant", "content": f"step {k}"} for k in range(8)]
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}, *steps]
    try:
        out = returns(lambda: am.before(ev, messages))
        assert out, "before waited for a model past upkeep_timeout"
        assert llm.entered.is_set() and not llm.answered.is_set()
        # Nothing was summarised: every step is still there.
        assert [m for m in out[0] if m["role"] == "assistant"] == steps
        report = am.after(ev, messages[:2], "ok")
        assert [c.status for c in report.compactions] == ["failed"]
        assert "upkeep_timeout" in (report.compactions[0].error or "")
    finally:
        llm.release.set()
    assert llm.answered.wait(30)
    am.close()
