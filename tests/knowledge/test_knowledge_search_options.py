"""A knowledge search's options go to Memory.search, but for those it sets itself (the
table it searches, above all): an InvalidArgumentError naming them, not Python's
TypeError of a keyword given twice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError
from memlane.knowledge import api


@pytest.fixture
def mem() -> Iterator[Memory]:
    with Memory(None, WordHashEmbedder()) as m:
        m.ingest_text("Tea is a drink made from leaves.", source="inline:tea", shared=True)
        m.add("tea in the memories table")
        yield m


def test_the_table_is_not_an_option(mem: Memory) -> None:
    with pytest.raises(InvalidArgumentError, match="table cannot be a knowledge search's option"):
        mem.search_knowledge("tea", table="memories")
    with pytest.raises(InvalidArgumentError, match="'documents' table"):
        mem.search_documents("tea", table="memories")
    # Without it, knowledge only.
    assert [h.record.table for h in mem.search_knowledge("tea", threshold=None)] == ["fragments"]


@pytest.mark.parametrize("key", ["query", "k", "mode", "filters", "table"])
def test_no_argument_it_passes_itself_is_an_option(mem: Memory, key: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{key} cannot be"):
        api.search(mem, "fragments", "tea", None, 5, None, "hybrid", None, {key: None})
