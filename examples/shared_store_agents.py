"""Two agents share one store; scopes keep each agent's and each user's memories apart.

A scope filter is applied inside the engine before ranking, so another
agent's memories are never even candidates.

Run: python examples/shared_store_agents.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import memlane


def main(path: Path) -> None:
    with memlane.Memory(path) as mem:
        mem.add_many(
            {"text": text, "agent_id": agent, "user_id": user}
            for text, agent, user in [
                ("Alice's favourite drink is green tea.", "assistant", "alice"),
                ("Bob drinks his coffee black.", "assistant", "bob"),
                ("Alice's laptop needs a new battery.", "helpdesk", "alice"),
            ]
        )
        mem.add("Team standup is at 9:30.", agent_id="assistant")

        # Each agent can open the store with its own default scope ...
        print("assistant, user alice:")
        for hit in mem.search(
            "What does she like to drink?", k=3, agent_id="assistant", user_id="alice"
        ):
            print(f"  {hit.score:.3f}  {hit.record.text}")
            assert hit.record.agent_id == "assistant" and hit.record.user_id == "alice"

        print("helpdesk, user alice:")
        for hit in mem.search("any hardware problems?", k=3, agent_id="helpdesk"):
            print(f"  {hit.score:.3f}  {hit.record.text}")
            assert hit.record.agent_id == "helpdesk"

        counts = {a: mem.count(agent_id=a) for a in ("assistant", "helpdesk")}
        print(f"memories per agent: {counts}")
        assert counts == {"assistant": 3, "helpdesk": 1}
        # Forgetting a user for one agent leaves the other agent's memories alone.
        assert mem.delete_all(agent_id="assistant", user_id="alice") == 1
        assert mem.count(user_id="alice") == 1

    # ... or by default_scope, which every call fills in where it is left out.
    with memlane.Memory(path, default_scope={"agent_id": "helpdesk"}) as helpdesk:
        assert [r.text for r in helpdesk.list()] == ["Alice's laptop needs a new battery."]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp) / "store")
