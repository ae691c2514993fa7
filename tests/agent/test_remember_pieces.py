"""``remember`` of content longer than the cap stores every piece, in one transaction:
pieces of a call whose metadata names an id the dedup window knows were taken for
repeats of the first and dropped (the tool said "stored as N parts" of one record), and
each piece was its own write (a kill left the fact cut). A call delivered again stores
nothing. Both backends."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import AgentMemory, SessionScope
from memlane._memory.duplicates import _ID_KEYS
from memlane.agent.turn_tools import WINDOW_IDS

PARAGRAPHS = [f"Paragraph {i}: " + " ".join(f"word{i}_{j}" for j in range(200)) for i in range(3)]


def test_the_window_ids_are_the_stores() -> None:
    assert set(WINDOW_IDS) == {name for name, _ in _ID_KEYS}


@pytest.mark.parametrize("meta", [{"messageId": "m-1"}, {"eventId": 7}, {}])
def test_every_piece_of_a_long_fact_is_stored_once(
    make_store: StoreFactory, meta: dict[str, Any]
) -> None:
    mem = make_store("pieces", WordHashEmbedder())
    agent = AgentMemory(mem, SessionScope(agent_id="bot"), upkeep="inline")
    event = agent.event("telegram", 42, chat_id=7)
    tools = agent.memory_tools(event)
    call = {"content": "\n\n".join(PARAGRAPHS), "metadata": meta}
    calls = [mem.add_many]

    def add_many(*args: Any, **kwargs: Any) -> Any:
        calls.append(add_many)
        return calls[0](*args, **kwargs)

    mem.add_many = add_many  # type: ignore[method-assign]
    first = tools.handle_tool_call("remember", call)
    assert first["ok"] and first["stored"] and len(calls) == 2  # one write for the whole
    assert len(set(first["ids"])) == len(first["ids"]) > 1
    stored = mem.list("memories", limit=50, **event.fields)
    assert sorted(r.id for r in stored) == sorted(first["ids"])
    text = " ".join(r.text for r in stored)
    assert all(f"Paragraph {i}:" in text for i in range(3))

    again = tools.handle_tool_call("remember", call)  # delivered again
    assert again["ok"] and not again["stored"] and again["duplicate_of"] == first["id"]
    assert mem.count("memories", **event.fields) == len(first["ids"])
    agent.close()


def test_a_long_fact_whose_first_piece_is_known_keeps_its_other_pieces(
    make_store: StoreFactory,
) -> None:
    mem = make_store("first-known", WordHashEmbedder())
    agent = AgentMemory(mem, SessionScope(agent_id="bot"), upkeep="inline")
    event = agent.event("telegram", 42, chat_id=7)
    tools = agent.memory_tools(event)
    tools.handle_tool_call("remember", {"content": PARAGRAPHS[0]})
    out = tools.handle_tool_call("remember", {"content": "\n\n".join(PARAGRAPHS)})
    assert out["stored"] and "held already" in out["note"]
    text = " ".join(r.text for r in mem.list("memories", limit=50, **event.fields))
    assert all(f"Paragraph {i}:" in text for i in range(3))
    agent.close()


def test_an_edited_message_delivered_again_stores_none_of_its_pieces(
    make_store: StoreFactory,
) -> None:
    # The same message id again, its text longer (an edit): the new pieces were stored,
    # and an unrelated message whose id was "m-1#2" was taken for piece 2 of "m-1".
    mem = make_store("edited", WordHashEmbedder())
    agent = AgentMemory(mem, SessionScope(agent_id="bot"), upkeep="inline")
    event = agent.event("telegram", 42, chat_id=7)
    tools = agent.memory_tools(event)
    first = tools.handle_tool_call(
        "remember", {"content": "\n\n".join(PARAGRAPHS[:2]), "metadata": {"messageId": "m-1"}}
    )
    edited = {"content": "\n\n".join(PARAGRAPHS), "metadata": {"messageId": "m-1"}}
    again = tools.handle_tool_call("remember", edited)
    assert not again["stored"] and again["duplicate"] == "window"
    assert mem.count("memories", **event.fields) == len(first["ids"])
    other = tools.handle_tool_call(
        "remember", {"content": "Bob plays chess", "metadata": {"messageId": "m-1#2"}}
    )
    assert other["stored"]
    agent.close()


def test_a_long_fact_that_repeats_a_passage_keeps_every_piece(make_store: StoreFactory) -> None:
    # Its pieces were unique items of one add_many, and a piece the same as an earlier
    # one was taken for its duplicate: the text came back with a passage missing.
    mem = make_store("repeats", WordHashEmbedder())
    agent = AgentMemory(mem, SessionScope(agent_id="bot"), upkeep="inline")
    event = agent.event("telegram", 42, chat_id=7)
    tools = agent.memory_tools(event)
    content = "\n\n".join([PARAGRAPHS[0], PARAGRAPHS[1], PARAGRAPHS[0], "The boiler broke."])
    first = tools.handle_tool_call("remember", {"content": content})
    assert first["ok"] and first["stored"] and "held already" not in first["note"]
    stored = sorted(
        mem.list("memories", limit=50, **event.fields), key=lambda r: r.metadata["part"]
    )
    assert [r.id for r in stored] == first["ids"]
    assert [r.metadata["part"] for r in stored] == list(range(1, stored[0].metadata["parts"] + 1))
    assert " ".join(r.text for r in stored).count("Paragraph 0:") == 2

    again = tools.handle_tool_call("remember", {"content": content})  # the same, said again
    assert again["ok"] and not again["stored"]
    assert mem.count("memories", **event.fields) == len(first["ids"])
    agent.close()


def test_pieces_of_one_text_are_not_each_others_duplicates_but_others_are(
    make_store: StoreFactory,
) -> None:
    mem = make_store("groups", WordHashEmbedder())
    piece = {"text": "the same passage", "unique": True, "agent_id": "bot"}
    one = [{**piece, "metadata": {"split_group": "g1", "part": i}} for i in (1, 2)]
    other = {**piece, "metadata": {"split_group": "g2", "part": 1}}
    out = mem.add_many([*one, other])
    assert [r.duplicate for r in out] == [None, None, "exact"]
    assert out[2].duplicate_of == out[0].id
    assert mem.count("memories", agent_id="bot") == 2
