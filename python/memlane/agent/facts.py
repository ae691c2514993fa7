"""One path for every fact the agent layer learns: checked against what it already knows.

A fact written by the ``remember`` tool, by reflection or by consolidation is stored at
once (durable before the turn returns), marked ``metadata["fact_check"] = "pending"``
when an upkeep model will check it. The check (``check_facts``, run by the upkeep in
the background) finds the memories of the same scope the fact may repeat, refine or
contradict (a hybrid search by its text, one by its meaning alone, and the scope's
most recent memories; in a store without vectors, the scope's newest memories ranked by
the default model's meaning, embedded at check time) and asks the model to decide, as
mem0 does for each new fact:

``add``
    the fact is new: it stays (marked ``"kept"``);
``update``
    it replaces a listed memory: that memory is superseded by the fact's text (its
    ``valid_to`` set, so ``search(as_of=...)`` still answers the past) and the fact's
    own record goes;
``delete``
    it makes a listed memory false without replacing it: that memory goes, the fact stays;
``none``
    it repeats what is known: the fact's record goes, and the memory it repeats (when
    the model names it) keeps when it was said again (``metadata["restated_at"]``, and
    the fact's ``learned`` order).

An ``update`` or ``delete`` changes only the version of the memory the model was shown:
one rewritten (``update``) or superseded by another writer while the model answered is
left as it is, and the fact stays pending for the next check, which shows the new text.
So is a fact rewritten while the model judged its old text: no decision is applied to it.

The newest statement wins. Pending facts are checked oldest first (by ``created_at``,
then in the order they were stored, so facts learnt together are compared with each
other too); a fact waits while an older pending fact is near it, and the model is
shown stored memories only, never a pending fact (however many pending facts are near,
they take none of the places of the memories shown). An ``update`` or ``delete`` of a
memory newer than the fact is refused: the memory stays and the fact settles as
``none``. Two checks of one scope at once (two workers, two processes) thus cannot make
an older value current over a newer one. Nor can they keep one fact twice: a fact is
added only if no memory and no older pending fact came near it while its model answered
(another check's, or one stored meanwhile); else it is checked again beside them.

Which of two statements is newer is ``memlane.agent.statements``'s to say. A repeat
refused as an exact duplicate is kept in the memory it repeats as the check keeps one it
drops (``restated``).

The check reads exactly its scope (``exact_scope``): a scope without an ``agent_id``
does not decide the facts of a scope with one, nor compare with its memories.

Each decision and the model's reason are kept in the history of the records it touched
(``by="fact-check"``; ``metadata["fact_decision"]`` and ``["fact_reason"]``). Without a
model no fact is marked: the exact and near-duplicate rules of ``add(unique=True)`` are
the whole check. A check that fails leaves its facts pending for the next one.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memlane.agent.fact_lease import one_check
from memlane.agent.fact_prompt import parse_decisions, prompt
from memlane.agent.llm import LLM
from memlane.agent.statements import LEARNED, RESTATED, learned, newer, order_of, said_at
from memlane.embeddings import CachedEmbedder, Embedder
from memlane.embeddings.lazy import default_embedder
from memlane.errors import ConflictError, InvalidArgumentError, MemlaneError, UnknownIdError
from memlane.scoping import exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory, Mode
    from memlane.records import MemoryRecord

__all__ = [
    "CHECK",
    "FactDecision",
    "FactReport",
    "candidates",
    "check_facts",
    "parse_decisions",
    "pending",
    "restated",
]

log = logging.getLogger("memlane.agent")

#: The metadata key of a memory an update made: the id of the fact merged into it.
_MERGED = "fact_merged_from"
#: The metadata key of a fact's check: "pending" until decided, then "kept".
CHECK = "fact_check"
#: Who the history names for the check's changes.
ACTOR = "fact-check"

#: New facts checked in one model call.
_BATCH = 20
#: Vectors of memories the fact check embedded in a store without vectors: 10 scopes' windows.
_MEANING_CACHE = 3000
#: The messages ``_warn_once`` has logged in this process.
_WARNED: set[str] = set()
#: Where a fact's sentences end, and how many of them are searched on their own.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_SENTENCES = 8
#: The metadata key naming the entry a part was split from (``caps.py``, ``turn_tools.py``).
_SPLIT = "split_group"
#: The reason of a fact kept because the scope holds nothing to compare it with.
_NOTHING_SHOWN = "no memory of the scope to compare with"


@dataclass(slots=True, frozen=True)
class FactDecision:
    """What the check decided for the fact ``fact`` (its id): ``decision`` with
    ``target`` (the listed memory updated or deleted) and the model's ``reason``."""

    fact: str
    decision: str
    reason: str
    target: str | None = None


@dataclass(slots=True)
class FactReport:
    """What ``check_facts`` did; ``error`` when the model failed (facts stay pending);
    ``waited`` when another check of the scope ran, asked to check these facts too."""

    decisions: list[FactDecision] = field(default_factory=list)
    error: str | None = None
    waited: bool = False


def pending(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metadata`` with the fact marked for the check, and (unless it has one) the order
    it was learnt in."""
    meta = dict(metadata or {})
    meta.setdefault(LEARNED, learned())
    meta[CHECK] = "pending"
    return meta


def candidates(
    memory: Memory,
    fact: MemoryRecord,
    table: str,
    scope: Mapping[str, str],
    k: int = 25,
    recent: int = 5,
    per_sentence: int = 5,
    by_meaning: int = 20,
    meaning: Embedder | None = None,
    window: int = 300,
    *,
    pending_only: bool = False,
) -> list[MemoryRecord]:
    """The current memories of exactly ``scope`` that ``fact`` may repeat, refine or
    contradict: the best ``k`` of a hybrid search by its text; for a fact of several
    sentences, the best ``per_sentence`` of a search by each (what one sentence changes
    is lost among the hits of the others' words); in a store with vectors, the best
    ``by_meaning`` of a search by meaning alone (the hybrid score halves a memory that
    says the same thing in other words, so memories that merely share the fact's words
    rank above it); then the ``recent`` newest of the scope. A store without vectors
    finds nothing by meaning, and a changed fact often shares no word with the one it
    changes ("we're on Elm Avenue now" after "we live on Bridge Street"): there, given
    ``meaning`` (an embedder), the best ``by_meaning`` of the scope's ``window`` newest
    memories by its vectors, embedded now. Facts still pending are not stored memories
    yet (``check_facts`` checks an older one first, and one another check may be
    settling right now must not become what a fact updates): they are left out however
    many they are; ``pending_only`` finds them alone instead (``check_facts`` reads them
    to know which facts wait). Each part is one index lookup (or one embedding batch of
    at most ``window`` texts), whatever the size of the store.
    ``benches/bench_fact_candidates.py`` measures how often the older version of a
    changed fact is among them, and chose the defaults."""
    fields, only = exact_scope(memory, scope)
    # Not itself, nor history, nor (unless asked for) a fact not checked yet, nor (when
    # asked for those) a memory: left out by each search, they take none of its places.
    which = {CHECK: "pending"} if pending_only else {CHECK: {"$ne": "pending"}}
    flt = {"$and": [only, {"id": {"$ne": fact.id}}, {"valid_to": None}, which]}
    sentences = [s for s in _SENTENCE_END.split(fact.text.strip()) if s.strip()]
    queries: list[tuple[str, int, Mode]] = [(fact.text, k, "hybrid")]
    if len(sentences) > 1:
        queries += [(s, per_sentence, "hybrid") for s in sentences[:_SENTENCES]]
    if memory.embedder is not None and by_meaning > 0:
        queries.append((fact.text, by_meaning, "vector"))
    hits = [
        h.record
        for query, n, mode in queries
        if n > 0
        for h in memory.search(
            query, n, mode=mode, table=table, filters=flt, track_access=False, **fields
        )
    ]
    newest = memory.list(table, limit=recent, filters=flt, **fields) if recent > 0 else []
    if memory.embedder is None and meaning is not None and by_meaning > 0 and window > 0:
        scope_newest = memory.list(table, limit=window, filters=flt, **fields)
        newest += _nearest(meaning, fact, scope_newest, by_meaning)
    out: dict[str, MemoryRecord] = {}
    for rec in [*hits, *newest]:
        # The filter again, on the rows read: a row rewritten after the engine matched it
        # (a fact another check settled just then) comes as it is now.
        if _pending(rec) == pending_only and rec.valid_to is None and rec.id != fact.id:
            out.setdefault(rec.id, rec)
    return list(out.values())


def _pending(rec: MemoryRecord) -> bool:
    return rec.metadata.get(CHECK) == "pending"


def _restate(memory: Memory, target: MemoryRecord, fact: MemoryRecord) -> None:
    """Keeps in ``target`` that ``fact``, a repeat of it dropped now, stated it again:
    when, and in which order its process learnt it, so that a fact stated in between
    and checked later (a consolidation that runs late) is older than the memory."""
    if not newer(fact, target):
        return
    meta = {**target.metadata, RESTATED: max(said_at(target), said_at(fact))}
    if order_of(fact) is not None:
        meta[LEARNED] = fact.metadata[LEARNED]
    memory.update(target, metadata=meta, by=ACTOR)


def restated(
    memory: Memory,
    record_id: str,
    at: float,
    metadata: Mapping[str, Any],
    before: float = math.inf,
) -> None:
    """Keeps in memory ``record_id`` that a statement of its very words, refused as its
    duplicate, said it again at ``at`` (in ``metadata``'s ``learned`` order), as the
    check keeps a repeat it drops, if it was last said before ``before``; a memory
    changed meanwhile is left (logged)."""
    try:
        target = memory.get(record_id)
        if said_at(target) >= before:
            return
        order = {LEARNED: metadata[LEARNED]} if LEARNED in metadata else {}
        again = dataclasses.replace(target, created_at=at, recorded_at=time.time(), metadata=order)
        _restate(memory, target, again)
    except MemlaneError as e:
        log.warning("memlane: a repeat of %s was not kept in it: %s", record_id, e)


@functools.cache
def _default_meaning() -> Embedder:
    """The default model, loaded at its first use and shared by every check of the
    process; its cache keeps a scope's memories from being embedded at every check."""
    return CachedEmbedder(default_embedder(), maxsize=_MEANING_CACHE)


def _nearest(
    meaning: Embedder, fact: MemoryRecord, recent: Sequence[MemoryRecord], n: int
) -> list[MemoryRecord]:
    """The ``n`` of ``recent`` nearest ``fact`` by ``meaning``'s vectors (none when the
    embedder fails: the other candidates still go to the model)."""
    if not recent:
        return []
    try:
        vectors = np.asarray(meaning.embed_batch([fact.text, *(r.text for r in recent)]))
    except Exception as e:  # a model that cannot load must not hold every fact pending
        _warn_once(f"memlane: the fact check ranks by words and recency alone: {e}")
        return []
    scores = vectors[1:] @ vectors[0]
    return [recent[int(i)] for i in np.argsort(-scores, kind="stable")[:n]]


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("%s", message)


def _mark(
    memory: Memory, fact: MemoryRecord, decision: str, reason: str, final: bool = True
) -> MemoryRecord:
    """Keeps the decision in the fact's history and returns the fact marked; ``final=False``
    for a fact about to be deleted: it stays pending, so a crash before the delete has it
    checked again rather than kept beside what its decision stored (an update's successor
    names it, and the next check drops it without asking: ``_merged_before``).
    Only the version the model was shown: a fact rewritten meanwhile is refused
    (``ConflictError``) and waits, pending, for a check of its new text."""
    state = "kept" if final else "pending"
    meta = {**fact.metadata, CHECK: state, "fact_decision": decision, "fact_reason": reason}
    return memory.update(fact, metadata=meta, by=ACTOR)


def _drop(memory: Memory, fact: MemoryRecord) -> None:
    """Deletes the version ``fact`` of a fact marked for it (``ConflictError`` if another
    writer changed it since: it stays, pending)."""
    only = {"$and": [{"id": fact.id}, {"updated_at": fact.updated_at}]}
    if not memory.delete_all(fact.table, filters=only) and fact.id in memory:
        raise ConflictError(f"fact {fact.id!r} changed while it was checked")


def _apply(
    memory: Memory,
    fact: MemoryRecord,
    decision: str,
    target: MemoryRecord | None,
    reason: str,
) -> FactDecision:
    """Stores ``decision``. Each step that changes another record comes after the fact is
    marked, pending still: a fact another check settled meanwhile (deleted, superseded)
    fails there, before anything else is changed, and a fact whose check dies halfway is
    checked again."""
    if target is not None and decision in ("update", "delete") and newer(target, fact):
        # The newest statement wins: an older fact (one another check settled already,
        # or stated before the memory) neither replaces nor deletes a newer memory.
        why = f"the model said {decision} {target.id}, which is newer and stays: {reason}"
        _drop(memory, _mark(memory, fact, "none", why, False))
        return FactDecision(fact.id, "none", why)
    if decision == "update" and target is not None:
        marked = _mark(
            memory, fact, "update", f"merged into the memory it updates: {reason}", False
        )
        # The successor holds a decided fact: neither the target's mark (kept, or pending
        # from a check that settled it meanwhile) nor the fact's is its own.
        meta = {
            k: v
            for k, v in {**target.metadata, **fact.metadata}.items()
            if k not in (CHECK, RESTATED)  # the successor is stated when the fact was
        }
        # The fact it came from: a check stopped before the fact's drop finds it so.
        meta |= {"fact_decision": "update", "fact_reason": reason, _MERGED: fact.id}
        # Not before the target became true: a fact learnt after it but dated before it
        # (the clock was set back between) replaces it from its start. Only the version
        # the model was shown (the record, not its id): one rewritten or superseded
        # meanwhile is refused (ConflictError) and the fact waits, pending.
        at = max(fact.created_at, target.created_at)
        memory.supersede(target, fact.text, at=at, by=ACTOR, metadata=meta)
        _drop(memory, marked)
    elif decision == "delete" and target is not None:
        why = f"made {target.id} false: {reason}"
        marked = _mark(memory, fact, "delete", why, False)
        # Only the version the model was shown: one rewritten or superseded meanwhile
        # is not what the fact made false (one deleted meanwhile is gone either way).
        shown_version = [{"id": target.id}, {"updated_at": target.updated_at}]
        only = {"$and": [*shown_version, {"valid_to": None}]}
        if not memory.delete_all(target.table, filters=only) and target.id in memory:
            raise ConflictError(f"memory {target.id!r} changed while the model decided")
        _mark(memory, marked, "delete", why)
    elif decision == "none":
        marked = _mark(memory, fact, "none", reason, False)
        if target is not None:  # the memory it repeats is as new as the fact
            _restate(memory, target, fact)
        _drop(memory, marked)
    else:
        _mark(memory, fact, "add", reason)
    return FactDecision(fact.id, decision, reason, None if target is None else target.id)


def check_facts(
    memory: Memory,
    llm: LLM,
    table: str,
    scope: Mapping[str, str],
    limit: int = _BATCH,
    meaning: Embedder | None = None,
) -> FactReport:
    """Checks the pending facts of exactly ``scope`` in ``table`` (the oldest ``limit``
    current ones a round), in as few model calls as their order allows: facts go to one
    call until one of them may change another of the call (an older pending fact among
    those ``candidates(pending_only=True)`` finds), which waits for the next call, made
    once the first call's decisions are stored. A fact near an older pending fact not of
    this check (stored since it began, or left by another check's change) waits for the
    next check, or round. One check of a scope runs at a time (``fact_lease``): one that
    finds another running asks it for a round more, which reads the pending facts after
    the ask (``waited``). Rounds go on while asked or while one read ``limit`` facts, up
    to ``fact_lease.ROUNDS``. Never raises: a failure of the model or of the store is in
    ``error`` and leaves the facts not yet decided pending; a fact the answer gives no
    valid decision for is kept.

    ``meaning``: the embedder ``candidates`` ranks a store's newest memories with when the
    store has no vectors; the default model unless given (a model that fails to load is
    logged once and the check goes on by words and recency)."""
    report = FactReport()
    if memory.embedder is None and meaning is None:
        meaning = _default_meaning()
    try:
        with one_check(memory, table, scope) as lease:
            report.waited = not lease.held  # the holder checks its facts in a round more
            more = False
            while lease.next_round(more):
                more = _check_all(memory, llm, table, scope, limit, meaning, report)
    except Exception as e:  # neither the model's failure nor the store's raises into the agent
        report.error = f"{type(e).__name__}: {e}"
    return report


def _check_all(
    memory: Memory,
    llm: LLM,
    table: str,
    scope: Mapping[str, str],
    limit: int,
    meaning: Embedder | None,
    report: FactReport,
) -> bool:
    """``check_facts``'s work, its scope's lease held; whether it read a full batch
    (more facts may be pending)."""
    # Every fact other processes stored is seen: a check blind to an older pending fact
    # of another process (its follower lagging after a server restart) adds beside it.
    memory.refresh()
    # Exactly the scope: one without an agent_id is not the agents' that have one.
    fields, only = exact_scope(memory, scope)
    checked = {CHECK: "pending", "valid_to": None}  # a superseded version is history
    flt = {"$and": [only, checked]}
    listed = memory.list(table, limit=limit, order="asc", filters=flt, **fields)
    facts = [f for f in listed if _pending(f) and f.valid_to is None]  # as read, not as matched
    facts = [f for f in facts if not _merged_before(memory, f, table, fields, only, report)]
    # The store's order: created_at, then the order of storing (facts learnt together).
    rank = {f.id: i for i, f in enumerate(facts)}

    def waits_for(rec: MemoryRecord, fact: MemoryRecord) -> bool:
        """Whether ``fact`` is checked after ``rec``, an older pending fact; the parts of
        an entry split for its length (``caps.py``) are one statement, checked together."""
        group = fact.metadata.get(_SPLIT)
        if not _pending(rec) or (group is not None and rec.metadata.get(_SPLIT) == group):
            return False
        return (rec.created_at, rank.get(rec.id, len(rank))) < (fact.created_at, rank[fact.id])

    once: set[str] = set()

    def arrived(fact: MemoryRecord, seen: set[str]) -> bool:
        """Whether a memory or an older pending fact near ``fact``, other than ``seen``,
        came since its candidates were read: another process's check settled it, or it
        was stored, meanwhile (two checks of one scope at once each kept their copy of
        one fact). Once per fact and check: then it waits for the next check."""
        memory.refresh()
        near = candidates(memory, fact, table, scope, meaning=meaning, pending_only=True)
        came = any(r.id not in seen and waits_for(r, fact) for r in near) or any(
            c.id not in seen for c in candidates(memory, fact, table, scope, meaning=meaning)
        )
        if came and fact.id in once:
            raise _Later
        once.add(fact.id)
        return came

    while facts:
        group: list[MemoryRecord] = []
        shown: dict[str, MemoryRecord] = {}
        rest: list[MemoryRecord] = []
        for i, fact in enumerate(facts):
            near = candidates(memory, fact, table, scope, meaning=meaning, pending_only=True)
            waits = {r.id for r in near if waits_for(r, fact)}
            if waits & {g.id for g in group}:
                rest = facts[i:]
                break
            if waits:
                continue
            group.append(fact)
            for c in candidates(memory, fact, table, scope, meaning=meaning):
                shown.setdefault(c.id, c)
        facts = _decide(memory, llm, group, list(shown.values()), report, arrived) + rest
    return len(listed) == limit


def _merged_before(
    memory: Memory,
    fact: MemoryRecord,
    table: str,
    fields: Mapping[str, Any],
    only: Mapping[str, Any],
    report: FactReport,
) -> bool:
    """Whether ``fact`` is one a check stopped between its update's supersede and the
    fact's drop (killed, or the store failing): its successor is stored, so the drop is
    finished now, not left to a model that might keep the fact beside its own successor.
    Only a settled successor of the fact's very words: a fact rewritten since is checked
    again, and a record that merely names the fact (any writer may) drops nothing that
    the store does not hold word for word."""
    if fact.metadata.get("fact_decision") != "update":
        return False
    named = [{_MERGED: fact.id}, {"fact_decision": "update"}, {CHECK: {"$ne": "pending"}}]
    merged = {"$and": [only, {"valid_to": None}, *named]}
    found = memory.list(table, limit=10, filters=merged, **fields)
    successor = next((r for r in found if r.text == fact.text and r.id != fact.id), None)
    if successor is None:
        return False
    try:
        _drop(memory, fact)
    except ConflictError:  # rewritten meanwhile: checked as it now reads
        return False
    why = "merged into the memory it updates before the check was stopped"
    report.decisions.append(FactDecision(fact.id, "update", why, successor.id))
    return True


class _Later(Exception):
    """A fact that waits for the next check."""


def _decide(
    memory: Memory,
    llm: LLM,
    facts: Sequence[MemoryRecord],
    shown: Sequence[MemoryRecord],
    report: FactReport,
    arrived: Callable[[MemoryRecord, set[str]], bool] | None = None,
) -> list[MemoryRecord]:
    """One model call's decisions for ``facts`` against ``shown``, applied; returns the
    facts left for the next call: among them a fact to add near which a memory or an
    older pending fact came meanwhile (``arrived``), to be checked beside it."""
    decided: dict[int, tuple[str, int | None, str]] = {}
    if shown:
        decided = parse_decisions(llm.complete(prompt(facts, shown)), len(facts), len(shown))
    touched: set[str] = set()
    later: list[MemoryRecord] = []
    seen = {r.id for r in (*shown, *facts)}
    for i, fact in enumerate(facts):
        given = ("add", None, "no decision was given" if shown else _NOTHING_SHOWN)
        decision, index, reason = decided.get(i, given)
        try:
            if decision == "add" and arrived is not None and arrived(fact, seen):
                later.append(fact)
                continue
        except _Later:
            continue
        target = None if index is None else shown[index]
        if target is not None and target.id in touched:
            # Two facts, one memory: the first replaced it, so the second is checked
            # again against what the first left (kept beside it, two facts that both
            # replace "Alice lives in Oslo" would both be current).
            later.append(fact)
            continue
        if target is not None:
            touched.add(target.id)
        try:
            report.decisions.append(_apply(memory, fact, decision, target, reason))
        except (UnknownIdError, ConflictError):
            continue  # changed meanwhile (deleted, superseded): checked again next time
        except InvalidArgumentError:
            if not _closed(memory, [fact] if target is None else [fact, target]):
                raise
    return later


def _closed(memory: Memory, records: Sequence[MemoryRecord]) -> bool:
    """Whether one of ``records`` was deleted or superseded since it was read. The store
    refuses to change a superseded version with ``InvalidArgumentError`` when it sees it
    so before its transaction (``ConflictError`` when inside it), as it refuses a bad
    value; a version once closed stays closed, so reading it after the refusal tells
    the two apart."""
    for rec in records:
        try:
            if memory.get(rec.id).valid_to is not None:
                return True
        except UnknownIdError:
            return True
    return False
