"""Context assembly: what a model should see before it answers a message.

``build_context`` gathers the long-term notes (OrcBot's files, see
``memlane.notes``), the speaker's contact profile, the room's latest daily
logs, its recent history, the relevant knowledge fragments and the relevant
memories, fits them into a token budget and returns them as sections plus one
text block. The budget is the whole prompt's: the system prompt and the message
are reserved first, then each section gets its share of the rest (elizaOS's
history 50 %, knowledge 30 %, the other 20 %), and a section that needs less than
its share gives what it leaves to the others.
The room's messages it reads are kept by ``memlane.agent.history``.

Tokens are counted with the default embedder's WordPiece tokenizer
(all-MiniLM-L6-v2's ``tokenizer.json``, shipped with memlane); should its file
be missing or damaged, with the documented fallback of one token per four
characters (rounded up), which overestimates English text, so a budget is
never exceeded by the fallback either. Pass ``count_tokens`` to use your
model's own tokenizer.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from memlane import coerce, times
from memlane.agent.daily import daily_line, recent_logs
from memlane.agent.history import MESSAGES, message_line
from memlane.agent.messages import neutral
from memlane.agent.profiles import contact_profile
from memlane.embeddings.lazy import is_default_model
from memlane.errors import InvalidArgumentError, MemlaneError, shown
from memlane.knowledge.api import Threshold
from memlane.notes import NOTE_LIMITS, check_limits, notes_context
from memlane.scoping import EventScope, agents_apart, scope_kwargs

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord, SearchHit

__all__ = [
    "DEFAULT_BUDGET",
    "KNOWLEDGE_LIMIT",
    "MIN_SCORE",
    "Context",
    "build_context",
    "char_token_count",
    "default_token_counter",
]

#: Shares of the token budget per section: elizaOS's history 50 %, knowledge 30 % and
#: the rest 20 % (memories, daily logs, the speaker's profile). What a section does not
#: use goes to the others (see ``build_context``).
DEFAULT_BUDGET: dict[str, float] = {
    "contact": 0.03,
    "daily": 0.05,
    "history": 0.5,
    "knowledge": 0.3,
    "memories": 0.12,
}
#: The relevance floor of the memories ``build_context`` injects (``min_score="default"``,
#: and so ``AgentMemory``'s auto-inject) with the default model: a minimum cosine
#: similarity to the message, the one signal of a hit that means the same for every
#: query and store (the fused score counts BM25 only when some stored text shares a
#: word with the query). Below the floors that keep 95 % of the relevant top-5 hits on
#: the train splits (``benches/tune_context_floor.py``; figures in ``benches/README.md``)
#: because "Alice is vegan" scores 0.146 for "what should I cook?" and must be kept.
MIN_SCORE = 0.14
#: Knowledge fragments considered at most (elizaOS's): they fill their share in order.
KNOWLEDGE_LIMIT = 20
_TITLES = {
    "contact": "Who you are talking to",
    "daily": "Daily log",
    "history": "Recent conversation",
    "knowledge": "Relevant knowledge",
    "memories": "What you remember",
}

TokenCounter = Callable[[str], int]


def char_token_count(text: str) -> int:
    """The fallback: ``ceil(len(text) / 4)`` tokens."""
    return math.ceil(len(text) / 4)


@functools.cache
def default_token_counter() -> TokenCounter:
    """Counts tokens with the default embedder's tokenizer, or ``char_token_count``."""
    from memlane._core import WordPiece
    from memlane.embeddings import default_tokenizer_path

    try:
        tokenizer = WordPiece.from_file(default_tokenizer_path())
    except MemlaneError:  # missing or damaged: the documented fallback
        return char_token_count

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    # A turn's context counts again the history lines and memories the turn before
    # counted: kept, they cost a lookup instead of a tokenizer run. Only lines of up to
    # 512 characters (a history line is cut at 420), so the texts kept take 4 MB at most.
    kept = functools.lru_cache(maxsize=2048)(count)

    def counted(text: str) -> int:
        return kept(text) if len(text) <= 512 else count(text)

    return counted


def token_counter(count_tokens: TokenCounter | None) -> TokenCounter:
    """The counter to use: a caller's is checked at each call, since every budget is
    worked out from its answers."""
    if count_tokens is None:
        return default_token_counter()
    if not callable(count_tokens):
        raise InvalidArgumentError(
            f"count_tokens must be a callable (text) -> int, got {type(count_tokens).__name__}"
        )

    def count(text: str) -> int:
        n = count_tokens(text)
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise InvalidArgumentError(
                f"count_tokens must return an int >= 0, got {shown(n)} for a text of "
                f"{len(text)} characters"
            )
        return int(n)

    return count


def _scopes(scope: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """The memories' scope and the history's: an ``EventScope``'s, or the fields given
    (``{}``: the store's ``default_scope``). Anything else is refused, and so is a
    field given as None: either, read as no fields, would read every scope's memories."""
    if isinstance(scope, EventScope):
        return scope_kwargs(scope.fields), scope_kwargs(scope.history)
    if not isinstance(scope, Mapping):
        raise InvalidArgumentError(
            f"scope must be an EventScope or a dict of scope fields, got {shown(scope)}"
        )
    # A field given as None would narrow nothing: {"user_id": request.user_id} for a
    # request without a user would read every user's memories.
    unset = sorted(str(f) for f, v in scope.items() if v is None)
    if unset:
        raise InvalidArgumentError(
            f"scope field(s) {unset} are None: give each a value, or leave it out "
            "({} is the store's default_scope)"
        )
    fields = scope_kwargs(scope)
    return fields, fields


def _fit(text: str, budget: int, count: TokenCounter) -> str:
    """The longest prefix of ``text`` (ending with "…") within ``budget`` tokens, or ""."""
    if count(text) <= budget:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # largest n with count(text[:n] + "…") <= budget
        mid = (lo + hi + 1) // 2
        if count(text[:mid] + "…") <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + "…" if lo else ""


def _take(lines: Sequence[str], budget: int, count: TokenCounter) -> list[str]:
    """Lines in order while they fit; the first that does not is cut to fit, then stop."""
    out: list[str] = []
    used = 0
    for line in lines:
        n = count(line)
        if used + n <= budget:
            out.append(line)
            used += n
            continue
        cut = _fit(line, budget - used, count)
        if cut:
            out.append(cut)
        break
    return out


@dataclass(slots=True)
class Context:
    """What [`build_context`][memlane.build_context] returns.

    ``sections`` maps ``contact``, ``daily``, ``history``, ``knowledge`` and
    ``memories`` to their lines (daily logs and history oldest first; knowledge and
    memories best first), and ``notes`` to the long-term notes' lines when there are
    any; ``tokens`` to the
    tokens each uses, ``budgets`` to what each was allowed (its share, and what
    sections that needed less gave it). ``text`` is the block to put in a prompt;
    ``records`` the memories and fragments behind it; ``reserved`` the tokens of the
    system prompt and the message, taken off ``max_tokens`` first.
    """

    sections: dict[str, list[str]]
    text: str
    tokens: dict[str, int]
    budgets: dict[str, int]
    records: dict[str, list[MemoryRecord]] = field(default_factory=dict)
    reserved: int = 0

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())


def _shares(max_tokens: int, budget: Mapping[str, float]) -> dict[str, float]:
    """The checked arguments: every section's share (0 for one left out)."""
    # Bounded as the agent's own budget is: the shares are taken in floats.
    coerce.count(max_tokens, "max_tokens", low=1)
    if not isinstance(budget, Mapping):
        raise InvalidArgumentError(f"budget must be a dict of shares, got {shown(budget)}")
    unknown = set(budget) - set(DEFAULT_BUDGET)
    if unknown:
        raise InvalidArgumentError(
            f"unknown budget section(s) {coerce.names(unknown)}; expected {sorted(DEFAULT_BUDGET)}"
        )
    shares = {k: budget.get(k, 0.0) for k in DEFAULT_BUDGET}
    for k, v in shares.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
            raise InvalidArgumentError(f"budget[{k!r}] must be a number in [0, 1], got {shown(v)}")
    if sum(shares.values()) > 1 + 1e-9:
        raise InvalidArgumentError(f"budget shares add up to more than 1: {shares}")
    return shares


def _share_out(
    tokens: int, shares: Mapping[str, float], demand: Mapping[str, int]
) -> dict[str, int]:
    """Each section's tokens of ``tokens``: its share, where a section that needs less
    than its share (``demand``: what all its lines would take) gives the rest to the
    others in proportion to their shares, until every section has what it needs or
    the shares' tokens are spent. A section with no share gets nothing."""
    out = dict.fromkeys(shares, 0)
    left = sum(int(tokens * v) for v in shares.values())  # what the shares hand out
    open_ = {k for k, v in shares.items() if v > 0}
    while open_:
        weight = sum(shares[k] for k in open_)
        offer = {k: int(left * shares[k] / weight) for k in open_}
        met = {k for k in open_ if demand[k] <= offer[k]}
        if not met:
            out.update(offer)
            break
        for k in met:
            out[k] = demand[k]
            left -= demand[k]
        open_ -= met
    return out


def _relevant_memories(
    mem: Memory,
    message: str,
    k: int,
    table: str,
    min_score: float | Literal["default"] | None,
    track_access: bool,
    fields: dict[str, Any],
    filters: dict[str, Any] | None,
    diversity: float,
) -> list[SearchHit]:
    if isinstance(min_score, str):
        if min_score != "default":
            raise InvalidArgumentError(
                f"min_score must be a number in [-1, 1], None or 'default', got {shown(min_score)}"
            )
        min_score = MIN_SCORE if is_default_model(mem.embedder) else None
    elif min_score is not None and (
        isinstance(min_score, bool)
        or not isinstance(min_score, int | float)
        or not -1.0 <= min_score <= 1.0
    ):
        raise InvalidArgumentError(
            f"min_score must be a number in [-1, 1], None or 'default', got {shown(min_score)}"
        )
    try:
        return mem.search(
            message,
            k,
            table=table,
            min_similarity=min_score,
            track_access=track_access,
            diversity=diversity,
            filters=filters,
            **fields,
        )
    except InvalidArgumentError:
        if min_score is None:
            raise
    # A text-only store (no query vector, so no similarity): no minimum. Any
    # other bad argument raises again here.
    return mem.search(
        message,
        k,
        table=table,
        track_access=track_access,
        diversity=diversity,
        filters=filters,
        **fields,
    )


def build_context(
    mem: Memory,
    message: str,
    scope: EventScope | Mapping[str, str],
    max_tokens: int = 2000,
    budget: Mapping[str, float] | None = None,
    *,
    inject_limit: int = 20,
    min_score: float | Literal["default"] | None = "default",
    diversity: float = 0.0,
    episodic_limit: int = 5,
    history_limit: int = 20,
    knowledge_limit: int = KNOWLEDGE_LIMIT,
    knowledge_threshold: Threshold = "default",
    agent_id: str | None = None,
    table: str = "memories",
    count_tokens: TokenCounter | None = None,
    track_access: bool = True,
    daily_limit: int = 3,
    profile: bool = True,
    notes: Mapping[str, int] | None = NOTE_LIMITS,
    system_prompt: str | None = None,
) -> Context:
    """The context for answering ``message``: history, knowledge and memories within budget.

    Args:
        mem: the store.
        message: the incoming message (the query for knowledge and memories).
        scope: an [`EventScope`][memlane.agent.EventScope] (memories in its scope,
            history of its room) or a dict of scope fields (used for both; ``{}``: the
            store's ``default_scope``). Anything else, None too, is refused.
        max_tokens: the whole prompt's budget: the tokens of ``message`` and of
            ``system_prompt`` come off it first, the context gets the rest.
        budget: shares of what is left per section (a section left out gets 0); None:
            history 0.5, knowledge 0.3, memories 0.12, daily 0.05, contact 0.03.
        inject_limit: memories injected at most, while their share of the budget
            lasts (as knowledge fills up to 20 fragments); chosen by measurement on
            the dated conversation set (``benches/README.md``, "Context"); 0: none.
        min_score: memories whose cosine similarity to the message is below this
            are left out (elizaOS's ``match_threshold``; None: no minimum).
            ``"default"`` is 0.14 (``MIN_SCORE``) with the default model (it was
            measured for that model's cosines) and no minimum with another
            embedder (pass a number measured for it). The fused search score
            counts BM25 only when some stored text shares a word with the
            message, so it means less across queries; the similarity does. A
            store without an embedder has no similarity, and there no minimum
            applies.
        diversity: the λ of the memories' search (``Memory.search``'s maximal marginal
            relevance; 0: off), measured in ``benches/README.md``, "Context precision".
        episodic_limit: the scope's newest episodic memories (consolidation's
            summaries) shown after the relevant ones, newest first, while the
            section's tokens last (OrcBot's 5; 0: none).
        history_limit: recent messages considered (0: none).
        knowledge_limit: fragments considered (elizaOS's 20; 0: none); they fill the
            section in order while its tokens last.
        knowledge_threshold: their minimum cosine similarity (``"default"``:
            [`search_knowledge`][memlane.Memory.search_knowledge]'s measured cut-off
            with the default model, none with another embedder; None: none).
        agent_id: whose private knowledge is also read (default: the scope's).
        count_tokens: a token counter, ``(text) -> int >= 0`` (default: see the
            module docs); any other answer is an ``InvalidArgumentError``.
        daily_limit: the room's newest daily logs shown ([`DailyLog`][memlane.agent.DailyLog]).
        profile: show the speaker's contact profile ([`Profiles`][memlane.agent.Profiles];
            an [`EventScope`][memlane.agent.EventScope] only).
        notes: characters of each kind of long-term note shown first (OrcBot's
            limits, see ``memlane.notes``; None: no notes). Their tokens come off
            what the reserve leaves, before the shares; the section is in
            ``sections["notes"]`` only when there are notes.
        system_prompt: the system prompt the context goes into, when the caller
            has it, so its tokens are reserved (``AgentMemory`` reserves pinned core
            memory blocks itself).

    The sections share ``T``, what the reserve and the notes leave: each is offered
    ``int(T * share)`` tokens for its header and lines; a section that needs less
    (an empty one needs none) keeps what it needs, and the rest is offered again to
    the sections that need more, in proportion to their shares, until each has
    what it needs or the shares' tokens are spent. A section with no share gets
    nothing, and the shares' sum is never exceeded. Within its tokens a section
    takes its lines in order; a line that would overflow is cut with "…" and the
    rest dropped. A reserve of ``max_tokens`` or more leaves an empty context.
    Stored text never reads as the tags of ``AgentMemory``'s memory block: the ``<``
    of ``<memlane-memory`` or ``</memlane-memory`` (any case) in a line is shown as
    ``&lt;``. Of the episodic memories, only current ones are shown (not superseded).
    """
    count = token_counter(count_tokens)
    shares = _shares(max_tokens, DEFAULT_BUDGET if budget is None else budget)
    if not isinstance(message, str):
        raise InvalidArgumentError(f"message must be a str, got {type(message).__name__}")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise InvalidArgumentError(
            f"system_prompt must be a str or None, got {type(system_prompt).__name__}"
        )
    for limit, label in (
        (inject_limit, "inject_limit"),
        (episodic_limit, "episodic_limit"),
        (history_limit, "history_limit"),
        (knowledge_limit, "knowledge_limit"),
        (daily_limit, "daily_limit"),
    ):
        coerce.count(limit, label)
    fields, history_scope = _scopes(scope)
    # An agent's turn (an EventScope) reads its own records, not another agent's in the
    # room (docs/agents.md); a dict of fields reads by prefix, as a search does.
    own = agents_apart(mem, fields) if isinstance(scope, EventScope) else None
    reserved = count(message) + (count(system_prompt) if system_prompt else 0)
    left = max_tokens - reserved
    pinned, pinned_records = ("", []) if notes is None else notes_context(mem, fields, notes)
    room = left - count("\n\n")
    pinned = _fit(neutral(pinned), room, count) if pinned and room > 0 else ""
    if pinned:  # the notes first, the sections share what is left
        left -= count(pinned + "\n\n")
    left = max(left, 0)
    wanted = {k: left > 0 and v > 0 for k, v in shares.items()}
    agent = agent_id if agent_id is not None else fields.get("agent_id")

    records: dict[str, list[MemoryRecord]] = {k: [] for k in DEFAULT_BUDGET}
    candidates: dict[str, list[str]] = {k: [] for k in DEFAULT_BUDGET}
    if wanted["contact"] and profile and isinstance(scope, EventScope):
        known = contact_profile(mem, scope)
        candidates["contact"] = [] if known is None else [known.describe()]
    if wanted["daily"]:
        records["daily"] = recent_logs(mem, history_scope, daily_limit)
        candidates["daily"] = [daily_line(r) for r in records["daily"]]
    if wanted["history"] and history_limit > 0:
        # Newest first.
        recent = mem.list(MESSAGES, limit=history_limit, filters=own, **history_scope)
        records["history"] = recent
        candidates["history"] = [message_line(r) for r in recent]
    if wanted["knowledge"] and knowledge_limit > 0 and message.strip():
        hits = mem.search_knowledge(
            message, agent_id=agent, k=knowledge_limit, threshold=knowledge_threshold
        )
        records["knowledge"] = [h.record for h in hits]
        candidates["knowledge"] = [" ".join(h.record.text.split()) for h in hits]
    if wanted["memories"] and inject_limit > 0 and message.strip():
        hits = _relevant_memories(
            mem, message, inject_limit, table, min_score, track_access, fields, own, diversity
        )
        records["memories"] = [h.record for h in hits]
        candidates["memories"] = [f"- {' '.join(h.record.text.split())}" for h in hits]
    if wanted["memories"] and episodic_limit > 0:
        shown = {r.id for r in records["memories"]}
        # Current ones only: a superseded episode is no longer true (docs/facts.md).
        current = {"valid_to": None} if own is None else {"$and": [own, {"valid_to": None}]}
        episodes = mem.list(table, limit=episodic_limit, type="episodic", filters=current, **fields)
        episodes = [r for r in episodes if r.id not in shown]
        records["memories"] += episodes
        candidates["memories"] += [
            f"- ({times.stamp(r.created_at, '%Y-%m-%d')} episode) {' '.join(r.text.split())}"
            for r in episodes
        ]

    # No line can end or open the memory block a prompt puts the context in.
    candidates = {name: [neutral(line) for line in lines] for name, lines in candidates.items()}

    # Each line's cost is asked for its section's demand and again as the section is
    # filled: counted once.
    @functools.cache
    def cost(text: str) -> int:
        # With its separator: the joined block then never counts more than its parts.
        return count(text + "\n\n")

    demand = {
        name: cost(f"## {_TITLES[name]}") + sum(cost(line) for line in lines) if lines else 0
        for name, lines in candidates.items()
    }
    budgets = _share_out(left, shares, demand)
    sections: dict[str, list[str]] = {}
    tokens: dict[str, int] = {}
    blocks: list[str] = []
    if pinned:
        sections["notes"] = pinned.splitlines()[1:]
        tokens["notes"] = budgets["notes"] = count(pinned)
        records["notes"] = pinned_records
        blocks.append(pinned)
    for name, lines in candidates.items():
        header = f"## {_TITLES[name]}"
        room = budgets[name] - cost(header)
        kept = _take(lines, room, cost) if lines and room > 0 else []
        if name in ("history", "daily"):
            kept.reverse()  # taken newest first, shown oldest first
            records[name] = records[name][: len(kept)][::-1]
        else:
            records[name] = records[name][: len(kept)]
        sections[name] = kept
        tokens[name] = 0
        if kept:
            blocks.append("\n".join([header, *kept]))
            tokens[name] = count(blocks[-1])
    return Context(sections, "\n\n".join(blocks), tokens, budgets, records, reserved)


#: What AgentMemory's ``context=`` may set: build_context's options but the ones it passes.
_CONTEXT_OPTIONS = frozenset(inspect.signature(build_context).parameters) - {
    "mem",
    "message",
    "scope",
    "max_tokens",
    "daily_limit",  # DailyLog.days
    "profile",  # Profiles.in_context
}


def check_context_options(options: Mapping[str, Any]) -> None:
    """Raises ``InvalidArgumentError`` unless every key of ``options``
    is a ``build_context`` option that AgentMemory's ``context=`` may set."""
    unknown = set(options) - _CONTEXT_OPTIONS
    if unknown:
        raise InvalidArgumentError(
            f"unknown build_context option(s) {coerce.names(unknown)}; "
            f"expected some of {sorted(_CONTEXT_OPTIONS)}"
        )
    if options.get("notes") is not None:  # refused now, not at every turn's context
        check_limits(options["notes"])
