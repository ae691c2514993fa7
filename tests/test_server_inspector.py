"""The inspector page in a real browser (headless Chromium): it loads from the server
alone, lists the records, searches with the explain signals drawn, opens a history, and
a fact superseded through the page is superseded in the store.

``MEMLANE_SCREENSHOTS=docs/inspector python -m pytest tests/test_server_inspector.py``
also saves a screenshot of each screen there (the ones docs/server.md shows)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from browser import Browser
from server_process import ServeProcess


def shot(browser: Browser, name: str) -> None:
    folder = os.environ.get("MEMLANE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.screenshot(Path(folder) / f"{name}.png")


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
        assert "4 records" in browser.run("document.querySelector('#stats').textContent")
        # Nothing but the server was asked for: no CDN, no font, no script from elsewhere.
        origins = browser.run(
            "[...new Set(performance.getEntriesByType('resource')"
            ".map(e => new URL(e.name).origin))]"
        )
        assert set(origins) <= {server.url}
        shot(browser, "records")

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
        shot(browser, "search")

        browser.run("document.querySelector('#hits .hit').click()")
        browser.wait("document.querySelectorAll('#history .version').length === 1")
        browser.run(
            "document.querySelector('#supersede-text').value = 'Alice lives in Lisbon';"
            "document.querySelector('#supersede-button').click()"
        )
        browser.wait("document.querySelectorAll('#history .version').length === 2")
        texts = browser.run(
            "[...document.querySelectorAll('#history .version > div:first-child')]"
            ".map(d => d.textContent)"
        )
        assert texts == ["Alice lives in Porto", "Alice lives in Lisbon"]
        shot(browser, "history")

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
