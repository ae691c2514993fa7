"""The inspector page in a real browser (headless Chromium): it loads from the server
alone, lists the records and pages through them by time, importance or use, searches
with the explain signals drawn, opens a history on its timeline, and a fact superseded
through the page is superseded in the store; it shows how the store's index stands and
what the upkeep did, cost and failed.

``MEMLANE_SCREENSHOTS=docs/inspector python -m pytest tests/server/test_server_inspector.py``
also saves a screenshot of each screen there (the ones docs/server.md shows)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from browser import Browser
from memlane import Memory
from server_process import ServeProcess
from upkeep_scripts import Model, agent, turn


def shot(browser: Browser, name: str, selector: str | None = None) -> None:
    folder = os.environ.get("MEMLANE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.screenshot(Path(folder) / f"{name}.png", selector)


def pick(browser: Browser, selector: str, value: str) -> None:
    """Sets a field of the page as a person would: its value, then its change event."""
    browser.run(
        f"{{ const e = document.querySelector({json.dumps(selector)}); e.value = "
        f"{json.dumps(value)}; e.dispatchEvent(new Event('change')) }}"
    )


def texts(browser: Browser, selector: str) -> list[str]:
    return browser.run(  # type: ignore[no-any-return]
        f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.textContent)"
    )


@pytest.fixture
def browser() -> Iterator[Browser]:
    b = Browser()
    yield b
    b.close()


def test_browse_search_open_a_history_and_supersede_through_the_page(
    browser: Browser, tmp_path: Path
) -> None:
    with ServeProcess(tmp_path / "s", "--create", "--embedder", "none") as server:
        api = httpx.Client(base_url=server.url, timeout=60)
        porto = api.post(
            "/v1/memories", json={"text": "Alice lives in Porto", "user_id": "alice"}
        ).json()
        api.post(
            "/v1/memories/batch",
            json={"items": [{"text": f"note {i}", "user_id": "bob"} for i in range(3)]},
        )
        browser.goto(server.url + "/")
        assert browser.wait("document.querySelectorAll('#record-list tr.record').length") == 4
        # The counts come from a request of their own, which may answer after the list.
        assert "4 records" in browser.wait("document.querySelector('#stats').textContent")
        # Nothing but the server was asked for: no CDN, no font, no script from elsewhere.
        origins = browser.run(
            "[...new Set(performance.getEntriesByType('resource')"
            ".map(e => new URL(e.name).origin))]"
        )
        assert set(origins) <= {server.url}

        browser.run(
            "document.querySelector('#search-mode').value = 'text';"
            "document.querySelector('#search-input').value = 'where is Porto';"
            "document.querySelector('#search-button').click()"
        )
        browser.wait("document.querySelectorAll('#hits .hit').length")
        first = browser.run("document.querySelector('#hits .hit').dataset.id")
        assert first == porto["id"]
        width = browser.run("document.querySelector('#hits .hit .bar.bm25').style.width")
        assert width == "100%"  # the best BM25 of the hits fills its bar
        shot(browser, "search", "#search-section")

        browser.run("document.querySelector('#hits .hit').click()")
        browser.wait("document.querySelectorAll('#history .version').length === 1")
        browser.run(
            "document.querySelector('#supersede-text').value = 'Alice lives in Lisbon';"
            "document.querySelector('#supersede-button').click()"
        )
        browser.wait("document.querySelectorAll('#history .version').length === 2")
        assert texts(browser, "#history .version > div:first-child") == [
            "Alice lives in Porto",
            "Alice lives in Lisbon",
        ]
        # The timeline: each version's valid time a bar (the old one ended), and the
        # time it was recorded a dot.
        assert browser.run("document.querySelectorAll('#timeline rect.valid').length") == 2
        assert browser.run("document.querySelectorAll('#timeline rect.ended').length") == 1
        assert browser.run("document.querySelectorAll('#timeline .recorded').length") == 2
        assert browser.run("document.querySelector('#timeline').getBoundingClientRect().height")
        shot(browser, "history", "#memory-section")

        old = api.get(f"/v1/memories/{porto['id']}").json()
        assert old["valid_to"] is not None  # closed in the store
        versions = api.get(f"/v1/memories/{porto['id']}/history").json()["versions"]
        assert [(v["record"]["text"], v["ended"], v["ended_by"]) for v in versions] == [
            ("Alice lives in Porto", "supersede", "inspector"),
            ("Alice lives in Lisbon", None, None),
        ]
        new_id = versions[-1]["record"]["id"]

        browser.run("document.querySelector('#delete-button').click()")
        browser.wait("document.querySelector('#actions').hidden")
        assert api.get(f"/v1/memories/{new_id}").status_code == 404
        api.close()


def test_the_page_sends_the_key_its_user_types(browser: Browser, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([{"key": "alice-0123456789abcdef", "scope": {"user_id": "alice"}}]))
    store = tmp_path / "s"
    with ServeProcess(store, "--create", "--embedder", "none", "--keys-file", keys) as server:
        auth = {"Authorization": "Bearer alice-0123456789abcdef"}
        httpx.post(f"{server.url}/v1/memories", json={"text": "tea"}, headers=auth)
        browser.goto(server.url + "/")
        assert "Unauthorized" in browser.wait("document.querySelector('#error').textContent")
        browser.run(
            "const k = document.querySelector('#key'); k.value = 'alice-0123456789abcdef';"
            "k.dispatchEvent(new Event('change'))"
        )
        assert browser.wait("document.querySelectorAll('#record-list tr.record').length") == 1
        assert browser.wait("document.querySelector('#jobs').textContent") == (
            "not shown for this key"
        )


def test_records_page_by_importance_and_by_use(browser: Browser, tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "s", "--create", "--embedder", "none") as server:
        api = httpx.Client(base_url=server.url, timeout=60)
        items = [
            {
                "text": f"item{i:02} note",
                "importance": ((i * 7) % 25) / 25,  # each its own
                "created_at": 1_700_000_000 + 60 * i,
                "user_id": "alice" if i % 2 else "bob",
            }
            for i in range(25)
        ]
        api.post("/v1/memories/batch", json={"items": items})
        for word in ("item03", "item03", "item08"):
            body = {"query": word, "k": 1, "mode": "text"}
            assert api.post("/v1/search", json=body).json()["hits"][0]["record"]["text"] == (
                f"{word} note"
            )
        by_importance = [
            i["text"] for i in sorted(items, key=lambda i: i["importance"], reverse=True)
        ]
        browser.goto(server.url + "/")
        assert browser.wait("document.querySelectorAll('#record-list tr.record').length") == 20
        first = "document.querySelector('#record-list tr.record td:nth-child(4)').textContent"
        assert browser.run(first) == "item24 note"  # by time, newest first
        pick(browser, "#sort", "importance")
        browser.wait(f"{first} === {json.dumps(by_importance[0])}")
        page = texts(browser, "#record-list tr.record td:nth-child(4)")
        shot(browser, "records", "#records-section")
        browser.run("document.querySelector('#next').click()")
        browser.wait("document.querySelectorAll('#record-list tr.record').length === 5")
        page += texts(browser, "#record-list tr.record td:nth-child(4)")
        assert page == by_importance
        assert browser.run("document.querySelector('#next').disabled")

        pick(browser, "#sort", "access_count")
        browser.wait(f"{first} === 'item03 note'")
        used = "document.querySelectorAll('#record-list tr.record td:nth-child(6)')"
        assert browser.run(f"[...{used}].slice(0, 3).map(e => e.textContent)") == ["2", "1", "0"]
        pick(browser, "#order", "asc")
        browser.wait(f"{first} === 'item00 note'")  # unused, the oldest first
        # The scope and the filters narrow the pages as they do by time.
        browser.run(
            "document.querySelector('#sort').value = 'importance';"
            "document.querySelector('#user_id').value = 'alice';"
            "document.querySelector('#filters').value = '{\"importance\": {\"$gte\": 0.6}}';"
            "document.querySelector('#apply').click()"
        )
        wanted = [
            i["text"]
            for i in sorted(items, key=lambda i: i["importance"])
            if i["user_id"] == "alice" and i["importance"] >= 0.6
        ]
        browser.wait(f"document.querySelector('#total').textContent === '({len(wanted)})'")
        assert texts(browser, "#record-list tr.record td:nth-child(4)") == wanted
        browser.run(
            "document.querySelector('#filters').value = '{not json';"
            "document.querySelector('#apply').click()"
        )
        assert "not JSON" in browser.wait("document.querySelector('#error').textContent")
        api.close()


class Down:
    """A model that is down: every call fails."""

    def complete(self, messages: Any) -> str:
        raise ConnectionError("the model is down")


def test_the_store_and_the_upkeep_screen(browser: Browser, tmp_path: Path) -> None:
    store = tmp_path / "s"
    with Memory(store, embedder=None) as mem:
        answer = json.dumps({"operations": [{"op": "remember", "content": "Alice is in Lisbon"}]})
        for model in (Model(answer), Down()):  # one reflection done, one failed
            am = agent(mem, model)
            alice = am.event("telegram", 42, 7)
            turn(am, alice, "I moved to Lisbon")
            turn(am, alice, "it is sunny")
            assert am.drain(timeout=60)
            am.close()
        forget = mem.add("a note to forget")
        now = time.time()
        holder = {"host": "gone/1", "pid": 7, "started": "1", "token": "t", "until": now - 60}
        waiting = {"v": 2, "kind": "reflection", "now": now - 3600, "holder": holder}
        mem.jobs.put("0001:left", json.dumps(waiting))  # its holder's lease is over
    with ServeProcess(store, "--embedder", "none") as server:
        api = httpx.Client(base_url=server.url, timeout=60)
        priced = {"per_million_in": 3, "per_million_out": 15}
        state = api.get("/v1/upkeep", params=priced).json()
        assert state["totals"]["jobs"] == 2 and state["totals"]["failed"] == 1
        # A delete leaves a tombstone until a snapshot holds it (closing wrote one).
        assert api.delete(f"/v1/memories/{forget.id}").status_code == 200
        index = api.get("/v1/stats").json()["index"]
        browser.goto(server.url + "/")
        row = "[...document.querySelectorAll('#upkeep-totals tr')].at(-1)?.children"
        browser.wait("document.querySelectorAll('#upkeep-totals tr').length === 2")
        cells = browser.run(f"[...{row}].map(e => e.textContent)")
        totals = state["totals"]
        assert cells == [
            "all",
            "2",
            "1",
            str(totals["calls"]),
            f"{totals['tokens_in']:,}",
            f"{totals['tokens_out']:,}",
            "—",  # no prices given yet
        ]
        # The answer to the first price alone comes back last: the page shows the latest.
        browser.run(
            "{ const real = window.fetch; let held = false; window.fetch = (url, options) => {"
            " const u = String(url); if (!held && u.includes('per_million_in')"
            " && !u.includes('per_million_out')) { held = true; return new Promise((r) =>"
            " setTimeout(r, 500)).then(() => real(url, options)).then((answer) => {"
            " setTimeout(() => { window.lateAnswered = true; }, 300); return answer; }); }"
            " return real(url, options); }; }"
        )
        pick(browser, "#price-in", "3")
        pick(browser, "#price-out", "15")
        cost = json.dumps(f"{totals['cost']:.4f}")
        browser.wait(f"{row}?.[6]?.textContent === {cost}")
        browser.wait("window.lateAnswered === true")
        assert browser.run(f"{row}?.[6]?.textContent") == json.loads(cost)
        assert totals["cost"] > 0
        failures = browser.run("document.querySelector('#failures').textContent")
        assert "ConnectionError: the model is down" in failures
        assert browser.run("document.querySelectorAll('#upkeep-done tr.failed').length") == 1
        assert "lease over since" in browser.run("document.querySelector('#jobs').textContent")
        health = browser.run("document.querySelector('#health').textContent")
        assert f"records indexed: {index['indexed']}" in health
        assert "tombstones in the change log: 1" in health
        assert "in step with the database" in health
        assert "changes since the snapshot: 1 " in health
        shot(browser, "store", "#store-section")
        shot(browser, "upkeep", "#upkeep-section")
        browser.goto(server.url + "/")  # the prices stay for the next visit
        browser.wait(f"{row}?.[6]?.textContent === {cost}")
        shot(browser, "inspector", "body")
        api.close()


def test_the_store_shows_its_largest_tables_and_scopes_and_how_many_more(
    browser: Browser, tmp_path: Path
) -> None:
    # 30 tables of one user each and 15 users more in "memories"; the largest scopes are
    # in the tables last by name, where an order by table would not reach them.
    items = [{"text": f"note {i}", "table": f"t{i:02}", "user_id": f"u{i}"} for i in range(30)]
    items += [{"text": f"more {i}", "user_id": f"m{i}"} for i in range(15)]
    items += [{"text": f"big {i}", "table": f"t{29 - i % 3}", "user_id": "big"} for i in range(9)]
    with ServeProcess(tmp_path / "s", "--create", "--embedder", "none") as server:
        api = httpx.Client(base_url=server.url, timeout=60)
        assert api.post("/v1/memories/batch", json={"items": items}).status_code == 201
        browser.goto(server.url + "/")
        assert "54 records" in browser.wait("document.querySelector('#stats').textContent")
        # It asked for as many as it shows, not for every scope of the store.
        asked = browser.run(
            "performance.getEntriesByType('resource').map(e => new URL(e.name))"
            ".filter(u => u.pathname === '/v1/stats').map(u => u.search)"
        )
        assert asked == ["?limit=20"]
        options = browser.run("[...document.querySelector('#table').options].map(o => o.value)")
        assert len(options) == 21
        scopes = texts(browser, "#stats .scope")
        assert len(scopes) == 20
        assert scopes[:3] == ["3 · t27 user=big", "3 · t28 user=big", "3 · t29 user=big"]
        assert texts(browser, "#stats .more") == ["and 11 more tables", "and 28 more scopes"]
        tables = texts(browser, "#stats .table")
        assert tables[:4] == ["memories: 15", "t27: 4", "t28: 4", "t29: 4"] and len(tables) == 20
        # The table list offers the same tables (and "all"), and says how many more there are.
        assert options == ["", *(t.split(":")[0] for t in tables)]
        assert browser.run("document.querySelector('#table-more').textContent") == (
            "11 more not listed"
        )
        # A table chosen stays chosen as the page refreshes its lists.
        pick(browser, "#table", "t28")
        browser.run("document.querySelector('#apply').click()")
        browser.wait("document.querySelector('#total').textContent === '(4)'")
        browser.wait(
            "performance.getEntriesByType('resource')"
            ".filter(e => new URL(e.name).pathname === '/v1/stats').length === 2"
        )
        assert browser.run("document.querySelector('#table').value") == "t28"
        assert browser.run("document.querySelector('#table').options.length") == 21
        api.close()


def test_records_whose_ids_are_path_steps_open_and_change_through_the_page(
    browser: Browser, tmp_path: Path
) -> None:
    ids = [".", "..", "history", "-", "a/b", "?x=1&y"]
    with ServeProcess(tmp_path / "s", "--create", "--embedder", "none") as server:
        api = httpx.Client(base_url=server.url, timeout=60)
        items = [
            {"text": f"record {i}", "id": i, "created_at": 1_700_000_000 + n}
            for n, i in enumerate(ids)
        ]
        assert api.post("/v1/memories/batch", json={"items": items}).status_code == 201
        browser.goto(server.url + "/")
        browser.wait(f"document.querySelectorAll('#record-list tr.record').length === {len(ids)}")

        def open_(rid: str) -> None:
            browser.run(
                "document.querySelector('#record-id').textContent = '';"
                f"[...document.querySelectorAll('#record-list tr.record')]"
                f".find(r => r.dataset.id === {json.dumps(rid)}).click()"
            )
            browser.wait(f"document.querySelector('#record-id').textContent === {json.dumps(rid)}")

        for rid in ids:
            open_(rid)
            assert texts(browser, "#history .version > div:first-child") == [f"record {rid}"]
            assert browser.run("document.querySelector('#error').textContent") == ""
        open_(".")
        browser.run(
            "document.querySelector('#supersede-text').value = 'record . again';"
            "document.querySelector('#supersede-button').click()"
        )
        browser.wait("document.querySelectorAll('#history .version').length === 2")
        versions = api.get("/v1/memories/-/history", params={"id": "."}).json()["versions"]
        assert [v["ended"] for v in versions] == ["supersede", None]
        open_("..")
        browser.run("document.querySelector('#delete-button').click()")
        browser.wait("document.querySelector('#actions').hidden")
        assert api.get("/v1/memories/-", params={"id": ".."}).status_code == 404
        assert api.get("/v1/memories/history").json()["text"] == "record history"
        assert api.get("/v1/memories/-").json()["text"] == "record -"
        api.close()


def test_a_stored_right_to_left_override_turns_no_words_around_it(
    browser: Browser, tmp_path: Path
) -> None:
    # "\u202eecila" is drawn "alice": without isolation it would also turn the labels and
    # values drawn after it, and a row of user "ecila" would pass for one of "alice".
    spoof = "\u202eecila"
    item = {"text": "note", "table": "t\u202e", "user_id": spoof, "agent_id": "x"}
    with ServeProcess(tmp_path / "s", "--create", "--embedder", "none") as server:
        api = httpx.Client(base_url=server.url, timeout=60)
        assert api.post("/v1/memories", json=item).status_code == 201
        browser.goto(server.url + "/")
        browser.wait("document.querySelectorAll('#record-list tr.record').length === 1")
        browser.wait("document.querySelectorAll('#stats .scope bdi').length")
        assert texts(browser, "#record-list td bdi") == [spoof, "x"]
        assert texts(browser, "#stats .scope bdi") == ["t\u202e", spoof, "x"]
        assert texts(browser, "#stats .table bdi") == ["t\u202e"]
        # Drawn in order: the user's value, then the agent's label to its right.
        value_right, label_left = browser.run(
            "(() => { const td = document.querySelectorAll('#record-list tr.record td')[2];"
            " const label = [...td.childNodes].find(n => n.nodeType === 3"
            " && n.textContent.includes('agent=')); const r = document.createRange();"
            " r.selectNodeContents(label); return [td.querySelector('bdi')"
            ".getBoundingClientRect().right, r.getBoundingClientRect().left] })()"
        )
        assert value_right <= label_left + 0.5
        api.close()
