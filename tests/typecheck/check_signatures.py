"""Calls mypy --strict must reject: misspelt keywords on Memory and AsyncMemory.

``tests/memory/test_aio.py`` runs mypy on this file (never imported or collected) and
expects exactly one ``call-arg`` error on each line marked ``# expect: call-arg``
and none elsewhere, so the correct calls show the signatures are not ``**kwargs``
catch-alls that would accept anything.
"""

from __future__ import annotations

from memlane import AsyncMemory, Memory


def sync_calls(mem: Memory) -> None:
    mem.add("x", agent_id="a", user_id="u")
    mem.search("x", agent_id="a", room_id="r")
    mem.list(world_id="w", session_id="s")
    mem.count(namespace="n")
    mem.add("x", agnet_id="a")  # expect: call-arg
    mem.search("x", agnet_id="a")  # expect: call-arg
    mem.list(usr_id="u")  # expect: call-arg
    mem.count(room="r")  # expect: call-arg
    mem.delete_all(namespce="n")  # expect: call-arg


async def async_calls(mem: AsyncMemory) -> None:
    await mem.add("x", agent_id="a", user_id="u")
    await mem.search("x", agent_id="a", room_id="r")
    await mem.list(world_id="w", session_id="s")
    await mem.count(namespace="n")
    await mem.add("x", agnet_id="a")  # expect: call-arg
    await mem.search("x", agnet_id="a")  # expect: call-arg
    await mem.list(usr_id="u")  # expect: call-arg
    await mem.search_knowledge("x", agent_id="a", k=3)
    await mem.ingest_text("x", sourc="inline:x")  # expect: call-arg
