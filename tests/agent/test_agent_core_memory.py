"""Pinned core memory (as Letta's blocks) on both backends: blocks persist and travel with
JSONL, sit at the head of before()'s memory block within the token budget, are edited by the
model through the OpenAI- and Anthropic-style loops, keep to their limits (a refused edit is
reported to the model, never raised), and stay inside their scope; a shared block is one block
for every agent of a user, and edits made at once (by two agents, or two threads) all land."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest

from memlane import AgentMemory, InvalidArgumentError, UnknownIdError
from memlane.agent import (
    Compaction,
    Consolidation,
    CoreMemory,
    CoreMemoryLimitError,
    FlushReminder,
    MemoryTools,
    Reflection,
    SessionScope,
    Shared,
    char_token_count,
)
from memlane.agent.core_memory import CORE, DEFAULT_BLOCK_LIMIT

OFF = {
    "reflection": Reflection(enabled=False),
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    # What each trigger does, as the turn's own report shows it (tests/agent/test_agent_upkeep.py
    # runs them in the background).
    "upkeep": "inline",
}
BLOCK = re.compile(r"<memlane-memory[^>]*>\n(.*?)\n</memlane-memory>", re.S)


def agent(mem, agent_id: str = "helper", **options: Any) -> AgentMemory:
    options.setdefault("core_memory", True)
    scopes = SessionScope("per-peer", agent_id=agent_id)
    return AgentMemory(mem, scopes, context={"min_score": None}, **{**OFF, **options})


def system_of(messages: list[dict[str, Any]]) -> str:
    (system,) = [m["content"] for m in messages if m["role"] == "system"]
    return str(system)


def openai_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def test_blocks_persist_across_reopen(make_store, word_embedder):
    mem = make_store("core", word_embedder)
    core = CoreMemory(mem, {"agent_id": "helper"})
    core.define("persona", "I am a patient cooking assistant.", description="who you are")
    core.define("human", limit=300)
    core.append("human", "Name: Alice.")
    core.append("human", "Vegan.")
    core.replace("persona", "patient", "cheerful")
    mem.close()

    mem = make_store("core", word_embedder)
    try:
        core = CoreMemory(mem, {"agent_id": "helper"})
        assert core.labels() == ["persona", "human"]
        assert core.get("human").value == "Name: Alice.\nVegan."
        assert core.get("human").limit == 300
        persona = core.get("persona")
        assert persona.value == "I am a cheerful cooking assistant."
        assert (persona.limit, persona.description) == (DEFAULT_BLOCK_LIMIT, "who you are")
        # Defining again (as at every start) keeps the value; the limit is updated.
        assert core.define("human", limit=500).value == "Name: Alice.\nVegan."
        assert core.get("human").limit == 500
        assert core.define("persona").description == "who you are"  # kept unless given
        # One current record per block; each edit superseded it, the old values kept.
        assert mem.count(CORE, filters={"valid_to": None}) == 2
        human = [v.record.text for v in mem.history(core.get("human").id)]
        assert human[:3] == ["human: ", "human: Name: Alice.", "human: Name: Alice.\nVegan."]
        core.set("human", "")
        assert core.get("human").value == ""
        assert '<human chars="0/500">' in core.render()
        core.delete("persona")
        assert core.labels() == ["human"]
    finally:
        mem.close()


def test_blocks_travel_with_jsonl(make_store, word_embedder, tmp_path):
    mem = make_store("source", word_embedder)
    try:
        core = CoreMemory(mem, {"agent_id": "helper", "user_id": "alice"})
        core.define("human", "Alice, vegan.", limit=100)
        mem.export_jsonl(tmp_path / "out.jsonl")
    finally:
        mem.close()
    fresh = make_store("copy", word_embedder)
    try:
        fresh.import_jsonl(tmp_path / "out.jsonl")
        copy = CoreMemory(fresh, {"agent_id": "helper", "user_id": "alice"})
        assert [(b.label, b.value, b.limit) for b in copy.blocks()] == [
            ("human", "Alice, vegan.", 100)
        ]
        copy.append("human", "Likes jazz.")
        assert copy.get("human").value == "Alice, vegan.\nLikes jazz."
    finally:
        fresh.close()


def test_scopes_isolate(make_store, word_embedder):
    mem = make_store("scopes", word_embedder)
    try:
        a, b = CoreMemory(mem, {"agent_id": "a"}), CoreMemory(mem, {"agent_id": "b"})
        a_alice = CoreMemory(mem, {"agent_id": "a", "user_id": "alice"})
        a.define("persona", "I am agent A.")
        a_alice.define("persona", "I am agent A, talking to Alice.")
        assert b.blocks() == []
        with pytest.raises(UnknownIdError, match="no core memory block 'persona'"):
            b.get("persona")
        # A scope does not see the scopes below it, nor they it.
        assert [x.value for x in a.blocks()] == ["I am agent A."]
        assert [x.value for x in a_alice.blocks()] == ["I am agent A, talking to Alice."]

        # Through AgentMemory: agent B's prompt never holds agent A's blocks.
        am_a, am_b = agent(mem, "a"), agent(mem, "b")
        ev_a, ev_b = am_a.event("telegram", 42), am_b.event("telegram", 42)
        am_a.core(ev_a).append("human", "Alice is vegan.")  # type: ignore[union-attr]
        hello = [{"role": "user", "content": "hello"}]
        assert "Alice is vegan." in system_of(am_a.before(ev_a, hello))
        prompt_b = system_of(am_b.before(ev_b, hello))
        assert "<human" in prompt_b and "Alice is vegan." not in prompt_b
    finally:
        mem.close()


def test_before_puts_blocks_first_within_the_budget(make_store, word_embedder):
    mem = make_store("budget", word_embedder)
    try:
        options = {"tools": False, "max_tokens": 300}
        # Enough memories that the budget, not the count, decides how many are shown.
        context = {"min_score": None, "count_tokens": char_token_count, "inject_limit": 40}
        plain = AgentMemory(mem, SessionScope(agent_id="h"), context=context, **{**OFF, **options})
        pinned = AgentMemory(
            mem, SessionScope(agent_id="h"), context=context, core_memory=True, **{**OFF, **options}
        )
        event = pinned.event("telegram", 42)
        for i in range(40):
            mem.add(f"Alice mentioned cooking fact number {i} about lentils", **event.fields)
        pinned.core(event).set("human", "Alice cooks lentils every Sunday. " * 10)  # type: ignore[union-attr]
        msgs = [{"role": "user", "content": "what about lentils and cooking?"}]

        body = BLOCK.search(system_of(pinned.before(event, msgs))).group(1)  # type: ignore[union-attr]
        assert body.startswith("## Core memory")
        assert body.index("<persona") < body.index("<human") < body.index("## What you remember")
        assert "Alice cooks lentils every Sunday." in body
        assert char_token_count(body) <= 300
        # Without core memory the retrieved memories get the whole budget, so more of them.
        alone = BLOCK.search(system_of(plain.before(event, msgs))).group(1)  # type: ignore[union-attr]
        assert "## Core memory" not in alone
        assert alone.count("lentils") > body.count("cooking fact")
    finally:
        mem.close()


@pytest.mark.parametrize("answer", [None, "12", 2.5, -1])
def test_a_token_counter_answering_no_count_is_refused_by_name(
    make_store, word_embedder, answer: object
) -> None:
    # The core blocks' budget was worked out from the counter's raw answer: a raw
    # TypeError, or a negative budget.
    mem = make_store("counter", word_embedder)
    try:
        context = {"count_tokens": lambda text: answer}
        am = AgentMemory(mem, SessionScope(agent_id="h"), context=context, core_memory=True, **OFF)
        event = am.event("telegram", 42)
        am.core(event).set("human", "Alice cooks lentils.")  # type: ignore[union-attr]
        with pytest.raises(InvalidArgumentError, match="count_tokens must return an int >= 0"):
            am.before(event, [{"role": "user", "content": "lentils?"}])
    finally:
        mem.close()


def test_openai_loop_edits_blocks(make_store, word_embedder):
    mem = make_store("openai", word_embedder)
    prompts: list[str] = []

    def chat(messages, tools=None):
        prompts.append(system_of(messages))
        names = {t["function"]["name"] for t in tools}
        assert {"core_memory_append", "core_memory_replace", "remember"} <= names
        last = messages[-1]
        if last["role"] == "user" and "vegan" in last["content"]:
            return openai_call("c1", "core_memory_append", {"label": "human", "content": "Vegan."})
        if last["role"] == "user":
            old, new = "Vegan.", "Vegetarian (eats eggs)."
            args = {"label": "human", "old_content": old, "new_content": new}
            return openai_call("c2", "core_memory_replace", args)
        result = json.loads(last["content"])
        assert result["ok"] and result["label"] == "human"
        return {"role": "assistant", "content": f"Noted ({result['chars']} chars)."}

    try:
        am = agent(mem)
        event = am.event("telegram", 42)
        loop = am.openai(chat)
        assert loop.run(event, [{"role": "user", "content": "I'm vegan"}]).reply == (
            "Noted (6 chars)."
        )
        assert am.core(event).get("human").value == "Vegan."  # type: ignore[union-attr]
        loop.run(event, [{"role": "user", "content": "I eat eggs now"}])
        assert am.core(event).get("human").value == "Vegetarian (eats eggs)."  # type: ignore[union-attr]
        # Each turn's prompt showed the block as it stood.
        assert '<human chars="0/2000">' in prompts[0]
        assert '<human chars="6/2000">\nVegan.\n</human>' in prompts[2]
    finally:
        mem.close()


def test_anthropic_loop_edits_and_limit_errors(make_store, word_embedder):
    mem = make_store("anthropic", word_embedder)
    results: list[dict[str, Any]] = []

    def create(system, messages, tools=None):
        assert {"core_memory_append", "core_memory_replace"} <= {t["name"] for t in tools}
        last = messages[-1]
        if isinstance(last["content"], str):
            calls = [
                ("t1", "core_memory_append", {"label": "human", "content": "Likes jazz."}),
                ("t2", "core_memory_append", {"label": "human", "content": "x" * 40}),
                ("t3", "core_memory_append", {"label": "mood", "content": "happy"}),
                (
                    "t4",
                    "core_memory_replace",
                    {"label": "human", "old_content": "rock", "new_content": "pop"},
                ),
            ]
            blocks = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
            return {"role": "assistant", "content": blocks}
        results.extend(last["content"])
        return {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}

    try:
        am = agent(mem, core_memory={"human": 30})
        event = am.event("discord", 7)
        result = am.anthropic(create).run(event, [{"role": "user", "content": "I like jazz"}])
        assert result.reply == "Done."
        by_id = {r["tool_use_id"]: (json.loads(r["content"]), r.get("is_error")) for r in results}
        assert by_id["t1"] == ({"ok": True, "label": "human", "chars": 11, "limit": 30}, None)
        over, is_error = by_id["t2"]
        assert is_error is True and over["error"]["type"] == "limit_exceeded"
        # 11 held, 11 + 1 + 40 = 52 would be 22 over the limit of 30.
        assert (over["limit"], over["size"], over["over"]) == (30, 11, 22)
        assert "limited to 30 characters" in over["error"]["message"]
        assert "22 over" in over["error"]["message"]
        unknown, _ = by_id["t3"]
        assert unknown["error"]["type"] == "not_found" and "'human'" in unknown["error"]["message"]
        missing, _ = by_id["t4"]
        assert missing["error"]["type"] == "not_found"
        assert "not in core memory block 'human'" in missing["error"]["message"]
        assert am.core(event).get("human").value == "Likes jazz."  # type: ignore[union-attr]
        assert am.core(event).labels() == ["human"]  # type: ignore[union-attr]
    finally:
        mem.close()


def test_tools_and_bad_input(make_store, word_embedder):
    mem = make_store("bad", word_embedder)
    try:
        core = CoreMemory(mem, {"agent_id": "helper"})
        plain = MemoryTools(mem, {"agent_id": "helper"})
        assert "core_memory_append" not in plain.names
        assert plain.handle_tool_call("core_memory_append", {})["error"]["type"] == "unknown_tool"
        tools = MemoryTools(mem, {"agent_id": "helper"}, core=core)
        assert {"core_memory_append", "core_memory_replace"} <= set(tools.names)
        core.define("human", limit=10)
        bad = tools.handle_tool_call("core_memory_append", {"label": "human"})
        assert bad["error"] == {
            "type": "invalid_arguments",
            "message": "missing required argument 'content'",
        }

        for label in ("", "1st", "has space", "x" * 65, 3):
            with pytest.raises(InvalidArgumentError, match="label"):
                core.define(label)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="limit must be an int >= 1"):
            core.define("persona", limit=0)
        with pytest.raises(CoreMemoryLimitError, match="limited to 5 characters"):
            core.define("persona", "too long for five", limit=5)
        with pytest.raises(CoreMemoryLimitError) as over:
            core.set("human", "eleven char")
        assert (over.value.limit, over.value.size, over.value.over) == (10, 0, 1)
        assert core.labels() == ["human"] and core.get("human").value == ""
        with pytest.raises(InvalidArgumentError, match="unknown scope field"):
            CoreMemory(mem, {"team": "x"})
        with pytest.raises(InvalidArgumentError, match="core_memory must be"):
            AgentMemory(mem, core_memory="yes")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="label"):
            AgentMemory(mem, core_memory={"bad label": 10})
        with pytest.raises(InvalidArgumentError, match="limit"):
            AgentMemory(mem, core_memory={"human": -1})
        assert mem.count(CORE, filters={"valid_to": None}) == 1
    finally:
        mem.close()


SHARED = {"persona": 300, "human": Shared(300, by=("user_id",))}


def test_a_shared_block_is_one_block_for_every_agent_of_a_user(make_store, word_embedder):
    mem = make_store("shared", word_embedder)
    try:
        am_a, am_b = agent(mem, "a", core_memory=SHARED), agent(mem, "b", core_memory=SHARED)
        ev_a, ev_b = am_a.event("telegram", 42), am_b.event("telegram", 42)
        tools_a, tools_b = am_a.memory_tools(ev_a), am_b.memory_tools(ev_b)
        hello = [{"role": "user", "content": "hello"}]

        appended = tools_a.handle_tool_call(
            "core_memory_append", {"label": "human", "content": "Alice is vegan."}
        )
        assert appended == {"ok": True, "label": "human", "chars": 15, "limit": 300}
        tools_a.handle_tool_call("core_memory_append", {"label": "persona", "content": "I am A."})
        # Agent B's next prompt holds A's edit of the shared block, not A's persona.
        prompt_b = system_of(am_b.before(ev_b, hello))
        assert '<human chars="15/300" shared_by="user_id">\nAlice is vegan.\n</human>' in prompt_b
        assert "I am A." not in prompt_b and '<persona chars="0/300">' in prompt_b
        # B's edit is A's at once.
        args = {"label": "human", "old_content": "vegan", "new_content": "vegetarian"}
        assert tools_b.handle_tool_call("core_memory_replace", args)["ok"]
        assert am_a.core(ev_a).get("human").value == "Alice is vegetarian."  # type: ignore[union-attr]
        assert "Alice is vegetarian." in system_of(am_a.before(ev_a, hello))

        # Another user has a block of their own; the block is the user's, whoever reads it.
        ev_other = am_a.event("telegram", 43)
        assert am_a.core(ev_other).get("human").value == ""  # type: ignore[union-attr]
        user = CoreMemory(mem, {"user_id": ev_a.fields["user_id"]})
        assert user.get("human").value == "Alice is vegetarian."
        assert mem.count(CORE, filters={"valid_to": None, "label": "human"}) == 2
        # The history says which agent made each edit.
        edits = mem.history(user.get("human").id)
        assert [(v.by, v.record.text) for v in edits[1:]] == [
            ("a", "human: Alice is vegan."),
            ("b", "human: Alice is vegetarian."),
        ]

        # A namespace is never crossed; a scope without the fields cannot share.
        tenant = CoreMemory(
            mem, {**ev_a.fields, "namespace": "acme"}, shared={"human": ("user_id",)}
        )
        assert tenant.define("human").value == ""
        with pytest.raises(InvalidArgumentError, match="has no \\['user_id'\\]"):
            CoreMemory(mem, {"agent_id": "a"}, shared={"human": ("user_id",)})
        with pytest.raises(InvalidArgumentError, match="scope fields"):
            Shared(100, by=("team",))
        with pytest.raises(InvalidArgumentError, match="limit"):
            Shared(0)
        with pytest.raises(InvalidArgumentError, match="shared by \\['user_id'\\], not"):
            tenant.define("human", limit=Shared(100, by=("user_id", "world_id")))
    finally:
        mem.close()


def test_two_agents_appending_at_once_both_land(make_store, word_embedder, monkeypatch):
    mem = make_store("race", word_embedder)
    try:
        fields = {"user_id": "alice", "session_id": "s"}
        share = {"human": Shared(500)}
        cores = [CoreMemory(mem, {"agent_id": a, **fields}, shared=share) for a in "ab"]
        for core in cores:
            core.define("human", limit=share["human"])
        # Both agents read the block before either writes: the later must not undo the first.
        barrier = threading.Barrier(2, timeout=60)
        waited = threading.local()
        calls: list[str] = []
        for name in ("supersede", "update"):
            method = getattr(mem, name)

            def wait_first(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                calls.append(_method.__name__)
                if not getattr(waited, "done", False):
                    waited.done = True
                    barrier.wait()
                return _method(*args, **kwargs)

            monkeypatch.setattr(mem, name, wait_first)
        errors: list[BaseException] = []

        def append(core: CoreMemory, text: str) -> None:
            try:
                core.append("human", text)
            except BaseException as e:
                errors.append(e)

        threads = [
            threading.Thread(target=append, args=(cores[0], "Vegan.")),
            threading.Thread(target=append, args=(cores[1], "Likes jazz.")),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert calls == ["supersede"] * 3  # one lost the race and was applied again
        value = cores[0].get("human").value
        assert sorted(value.split("\n")) == ["Likes jazz.", "Vegan."]
        assert cores[1].get("human").value == value
    finally:
        mem.close()


def test_threads_of_one_agent_never_lose_an_append(make_store, word_embedder):
    mem = make_store("threads", word_embedder)
    try:
        core = CoreMemory(mem, {"agent_id": "helper"})
        core.define("human", limit=1000)
        errors: list[BaseException] = []

        def append(worker: int) -> None:
            try:
                for i in range(5):
                    CoreMemory(mem, {"agent_id": "helper"}).append("human", f"fact {worker}.{i}")
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=append, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        lines = core.get("human").value.split("\n")
        assert sorted(lines) == sorted(f"fact {w}.{i}" for w in range(3) for i in range(5))
        # Each thread's own appends stay in its order.
        for w in range(3):
            mine = [line for line in lines if line.startswith(f"fact {w}.")]
            assert mine == [f"fact {w}.{i}" for i in range(5)]
    finally:
        mem.close()


def test_the_system_prompt_comes_off_the_budget(make_store, word_embedder):
    """AgentMemory's max_tokens is the prompt's budget for what memory adds: a long
    system prompt leaves the context block less room than a short one."""
    mem = make_store("reserve", word_embedder)
    try:
        context = {"min_score": None, "count_tokens": char_token_count, "inject_limit": 40}
        am = AgentMemory(
            mem, SessionScope(agent_id="h"), context=context, tools=False, max_tokens=600, **OFF
        )
        event = am.event("telegram", 42)
        for i in range(40):
            mem.add(f"Alice mentioned cooking fact number {i} about lentils", **event.fields)
        msgs = [{"role": "user", "content": "what about lentils and cooking?"}]

        def shown(system: str) -> int:
            out = am.before(event, [{"role": "system", "content": system}, *msgs])
            return BLOCK.search(system_of(out)).group(1).count("cooking fact")  # type: ignore[union-attr]

        short, long = shown("You are a bot."), shown("You are a careful bot. " * 15)
        assert 0 < long < short
    finally:
        mem.close()
