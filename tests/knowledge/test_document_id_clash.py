"""Two owners whose document ids are one: an id hashes ``"{agent}|{shared}|{path}"``,
which an agent id or a path holding ``|`` makes ambiguous (agent ``"team"`` with the
file ``x|False|p.md`` and agent ``"team|False|x"`` with ``p.md``). An ingest replaces
and deletes only its own owner's records, so the other owner's document stays, and
the ingest whose id is taken is refused, naming the file, with nothing of it stored.
On both backends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError
from memlane.knowledge import document_id
from memlane.knowledge.documents import remove_documents
from memlane.knowledge.pipeline import Owner

VICTIM, ATTACKER = "team|False|x", "team"
SECRET = "# Payroll\n\nThe victim's private salary table: 120k.\n"


def folders(tmp_path: Path) -> tuple[Path, Path]:
    victim, attacker = tmp_path / "victim", tmp_path / "attacker"
    victim.mkdir()
    attacker.mkdir()
    (victim / "p.md").write_text(SECRET)
    (attacker / "x|False|p.md").write_text("# Hi\n\nNothing to see here.\n")
    (attacker / "other.md").write_text("# Other\n\nThe attacker's own note.\n")
    return victim, attacker


def state(mem: Memory, agent: str) -> tuple[list[tuple[str, str]], int]:
    docs = [(d.id, d.text) for d in mem.list_documents(agent, shared=False)]
    return docs, mem.count("fragments", filters={"shared": False, "agent_id": agent})


def test_the_ids_do_clash() -> None:
    victim = document_id("p.md", agent_id=VICTIM, shared=False)
    assert document_id("x|False|p.md", agent_id=ATTACKER, shared=False) == victim


def test_an_ingest_never_deletes_another_agents_document(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    victim_dir, attacker_dir = folders(tmp_path)
    mem = make_store("clash", word_embedder)
    mem.ingest(victim_dir, agent_id=VICTIM, progress=False)
    before = state(mem, VICTIM)
    assert before[0] and before[1]
    clashing = document_id("p.md", agent_id=VICTIM, shared=False)

    with pytest.raises(InvalidArgumentError, match=re.escape("'x|False|p.md'")) as caught:
        mem.ingest(attacker_dir, agent_id=ATTACKER, progress=False, batch_size=10_000)
    assert clashing in str(caught.value)
    assert "not this owner's document" in str(caught.value)

    assert state(mem, VICTIM) == before
    assert mem.get(clashing).text == SECRET.strip()
    # Nothing of the refused batch (one transaction) is stored.
    assert state(mem, ATTACKER) == ([], 0)
    hits = mem.search_knowledge("salary table", agent_id=VICTIM, threshold=None, mode="text")
    assert [h.record.metadata["document_id"] for h in hits] == [clashing]
    assert mem.search_knowledge("salary table", agent_id=ATTACKER, mode="text") == []


def test_the_first_owner_keeps_the_id_either_way(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    """The one who took the id first keeps it: the victim's ingest is refused then, and
    the attacker's document is not replaced by the victim's text."""
    victim_dir, attacker_dir = folders(tmp_path)
    (attacker_dir / "other.md").unlink()
    mem = make_store("clash", word_embedder)
    mem.ingest(attacker_dir, agent_id=ATTACKER, progress=False)
    before = state(mem, ATTACKER)
    with pytest.raises(InvalidArgumentError, match=re.escape("'p.md'")):
        mem.ingest(victim_dir, agent_id=VICTIM, progress=False)
    assert state(mem, ATTACKER) == before
    assert state(mem, VICTIM) == ([], 0)


def test_a_private_id_that_is_a_shared_one(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    """Shared ids have no agent: ``"|True|a|False|p.md"`` is also agent ``"|True|a"``'s
    ``p.md``. The private ingest leaves the shared document to every agent."""
    shared_dir, private_dir = tmp_path / "shared", tmp_path / "private"
    shared_dir.mkdir()
    private_dir.mkdir()
    (shared_dir / "a|False|p.md").write_text("# Shared\n\nEvery agent reads the handbook.\n")
    (private_dir / "p.md").write_text("# Mine\n\nOverwritten, if it could be.\n")
    shared_id = document_id("a|False|p.md", agent_id=None, shared=True)
    assert document_id("p.md", agent_id="|True|a", shared=False) == shared_id
    mem = make_store("clash", word_embedder)
    mem.ingest(shared_dir, shared=True, progress=False)
    fragments = len(mem.get_fragments(shared_id))
    with pytest.raises(InvalidArgumentError, match=shared_id):
        mem.ingest(private_dir, agent_id="|True|a", progress=False)
    assert mem.get(shared_id).metadata["shared"] is True
    assert len(mem.get_fragments(shared_id)) == fragments
    assert "handbook" in mem.get(shared_id).text


def test_removal_on_an_owners_behalf_leaves_another_owners_records(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    """What a prune, an emptied file and the watch delete through: the owner's filter."""
    victim_dir, _ = folders(tmp_path)
    mem = make_store("clash", word_embedder)
    mem.ingest(victim_dir, agent_id=VICTIM, progress=False)
    before = state(mem, VICTIM)
    clashing = document_id("p.md", agent_id=VICTIM, shared=False)
    for owner in (Owner.of(ATTACKER, False), Owner.of(None, True)):
        assert remove_documents(mem, [clashing], owner.filter()) == 0
    assert state(mem, VICTIM) == before
    # The owner's own filter (and none: remove_document, which names the document) do.
    assert remove_documents(mem, [clashing], Owner.of(VICTIM, False).filter()) == before[1]
    assert state(mem, VICTIM) == ([], 0)


def test_an_emptied_file_and_a_prune_leave_another_agents_document(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    victim_dir, attacker_dir = folders(tmp_path)
    mem = make_store("clash", word_embedder)
    mem.ingest(victim_dir, agent_id=VICTIM, progress=False)
    before = state(mem, VICTIM)
    (attacker_dir / "x|False|p.md").write_text("")  # emptied: its document would go
    report = mem.ingest(attacker_dir, agent_id=ATTACKER, progress=False, prune_missing=True)
    assert report.pruned == {}
    assert "x|False|p.md" in report.skipped
    assert state(mem, VICTIM) == before
