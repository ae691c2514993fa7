"""What a newcomer trips on first: messages of a single add, the embedder argument, and
``add_many``'s progress bar."""

from __future__ import annotations

import numpy as np
import pytest

import memlane
from memlane.errors import InvalidArgumentError


@pytest.fixture
def mem():
    with memlane.Memory(None, None) as m:
        yield m


@pytest.mark.parametrize("text", ["", "   "])
def test_a_single_add_names_no_position(mem, text):
    with pytest.raises(InvalidArgumentError) as e:
        mem.add(text)
    assert str(e.value) == "text is empty or whitespace-only"
    # add_many names the item, since it has many.
    with pytest.raises(InvalidArgumentError, match=r"^record 1: text is empty"):
        mem.add_many([{"text": "fine"}, {"text": text}])
    assert len(mem) == 0


def test_a_bad_vector_of_a_single_add_names_no_position():
    dim = 8

    class Tiny:
        name, dimension = "tiny", dim

        def embed(self, text):
            return np.ones(dim, dtype=np.float32)

        def embed_batch(self, texts):
            return np.ones((len(texts), dim), dtype=np.float32)

    with memlane.Memory(None, Tiny()) as m:
        with pytest.raises(InvalidArgumentError) as e:
            m.add("x", embedding=np.full(dim, np.nan, dtype=np.float32))
        assert str(e.value) == "embedding has a non-finite value (NaN or infinity)"
        rec = m.add("x")
        with pytest.raises(InvalidArgumentError) as e:
            m.update(rec.id, embedding=np.zeros(dim, dtype=np.float32))
        assert str(e.value) == "embedding is all zeros"


@pytest.mark.parametrize("name", ["none", "onnx", ""])
def test_an_embedder_name_is_refused_naming_embedder_none(name):
    with pytest.raises(InvalidArgumentError, match=r"embedder=None"):
        memlane.Memory(None, name)


def test_add_many_shows_progress_on_request(mem, capsys):
    items = [{"text": f"note {i}"} for i in range(1100)]
    records = mem.add_many(items, progress=True)
    err = capsys.readouterr().err
    assert len(records) == 1100 and len(mem) == 1100
    assert "add_many" in err and "1100/1100" in err
    mem.add_many([{"text": "quiet"}])
    assert capsys.readouterr().err == ""
    with pytest.raises(InvalidArgumentError, match="progress must be a bool"):
        mem.add_many([{"text": "y"}], progress="yes")  # type: ignore[arg-type]
    assert len(mem) == 1101


def test_async_add_many_takes_progress(capsys):
    import asyncio

    async def main():
        async with memlane.AsyncMemory(None, None) as m:
            return await m.add_many([{"text": "a"}, {"text": "b"}], progress=True)

    assert len(asyncio.run(main())) == 2
    assert "2/2" in capsys.readouterr().err
