"""Contact profiles (as OrcBot keeps them): who the agent talks to, under which names and
on which platforms, since when and how often.

One record per canonical contact in the ``contacts`` table, in exactly the contact's
memory scope (an agent's profiles are not another agent's, nor another namespace's),
rewritten in place (same id) by ``after`` at each turn the contact speaks. The record's
text names the contact, its aliases and platform ids (so a search finds it by any of
them); its ``metadata`` holds the profile's fields. The text changes (and is embedded
again) only when a new alias or platform id appears, not at every message.

Several writers (two agents, two processes on one PostgreSQL schema) may count the same
contact at once, and none loses another's count, alias or platform id: the profile's
id is derived from its scope and contact, so of two first messages one creates it and
the other is refused and merges into it; and a merge replaces the profile only while
it is the version the merge read (its ``metadata["version"]``, checked in the
transaction that stores it), else it is merged again into the version another writer
left. The id can be computed by anyone: a record held under it that is not this scope's
profile of this contact is never read as the profile, which then takes the next of its
spare ids (``derived_ids.derived_ids``: tried in order, so writers creating it at once
still make one profile).

"The contact" is the person the scope mode keys memory by: the canonical identity
(after the ``SessionScope``'s identity links) in ``"main"`` and
``"per-peer"`` modes, the raw platform identity in ``"per-channel-peer"`` mode, where
links are ignored.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlane import coerce, edits, times
from memlane.derived_ids import add_derived, find_derived
from memlane.errors import ConflictError, InvalidArgumentError, shown
from memlane.scoping import EventScope, SessionScope, exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["CONTACTS", "ContactProfile", "Profiles", "contact_profile", "record_contact"]

#: The table contact profiles live in.
CONTACTS = "contacts"
_TYPE = "profile"
#: The metadata key of a profile version's token, new at every write: a merge is stored
#: only while the profile holds the token it read. A token, not a counter, so a profile
#: deleted and made again never matches what a slow writer read of the old one.
_VERSION = "version"


@dataclass(frozen=True, slots=True)
class Profiles:
    """Contact profiles kept by [`AgentMemory.after`][memlane.AgentMemory.after].

    Attributes:
        max_aliases: display names kept per contact (20); past it the oldest
            goes, so a contact who renames often keeps their recent names.
        in_context: the current speaker's profile goes into the context block
            (``build_context``'s ``contact`` section) (True).
        enabled: False stops keeping them (stored profiles stay readable).
    """

    max_aliases: int = 20
    in_context: bool = True
    enabled: bool = True

    def __post_init__(self) -> None:
        coerce.count(self.max_aliases, "Profiles.max_aliases", 1)


@dataclass(frozen=True, slots=True)
class ContactProfile:
    """One contact as ``contact_profile`` reads it.

    ``contact``: the canonical contact (see the module docs); ``aliases``: the
    display names seen, oldest first, without case-insensitive repeats;
    ``platform_ids``: ``source -> contact ids`` on that platform (seen, or linked
    to the contact by the identity links); ``first_seen``/``last_seen``: unix
    seconds of the first and latest message; ``message_count``: turns the contact
    spoke in; ``id``: the record's id.
    """

    contact: str
    aliases: tuple[str, ...]
    platform_ids: dict[str, tuple[str, ...]]
    first_seen: float
    last_seen: float
    message_count: int
    id: str

    def describe(self) -> str:
        """One line for a prompt: names, platforms, how much and when."""
        day = "%Y-%m-%d"
        first = times.stamp(self.first_seen, day)
        last = times.stamp(self.last_seen, day + " %H:%M")
        return (
            f"{_text(self.contact, self.aliases, self.platform_ids)}; "
            f"{self.message_count} message{'s' if self.message_count != 1 else ''} "
            f"since {first}, last seen {last} UTC"
        )


def _key(event: EventScope) -> str:
    return event.contact if event.mode == "per-channel-peer" else event.identity


def _text(contact: str, aliases: tuple[str, ...], ids: dict[str, tuple[str, ...]]) -> str:
    out = f"Contact {contact}"
    if aliases:
        out += f", also known as {', '.join(aliases)}"
    if ids:
        out += "; on " + ", ".join(f"{src} {' '.join(ids[src])}" for src in sorted(ids))
    return out


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a contact's profile lives: its exact scope, the filter matching that scope
    only (every other scope field unset), the contact, and the id derived from them."""

    scope: dict[str, Any]
    only: dict[str, Any]
    contact: str
    id: str


def _place(mem: Memory, event: EventScope) -> _Place:
    if not isinstance(event, EventScope):
        raise InvalidArgumentError(f"event must be an EventScope, got {shown(event)}")
    scope, only = exact_scope(mem, event.fields)
    contact = _key(event)
    key = json.dumps([CONTACTS, sorted(scope.items()), contact])
    return _Place(scope, only, contact, "contact-" + hashlib.sha256(key.encode()).hexdigest()[:32])


def _mine(rec: MemoryRecord, place: _Place) -> MemoryRecord | None:
    """``rec`` if it is this scope's profile of this contact."""
    if (
        rec.table == CONTACTS
        and rec.type == _TYPE
        and rec.current
        and rec.scope == place.scope
        and rec.metadata.get("contact") == place.contact
        and _well_formed(rec.metadata)
    ):
        return rec
    return None


def _texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _well_formed(meta: dict[str, Any]) -> bool:
    """Whether a profile's metadata is what this module writes (a record of the scope
    shaped otherwise is its writer's own, not the profile)."""
    ids = meta.get("platform_ids", {})
    return (
        _texts(meta.get("aliases", []))
        and isinstance(ids, dict)
        and all(_texts(v) for v in ids.values())
        and all(
            isinstance(meta.get(k), int | float) and not isinstance(meta.get(k), bool)
            for k in ("first_seen", "last_seen", "message_count")
        )
        and isinstance(meta["message_count"], int)
    )


def _record(mem: Memory, place: _Place, embedding: bool = False) -> MemoryRecord | None:
    """The profile: read by its ids from the database (the index may not show yet what
    another process wrote); else (kept before ids were derived, or under a random id
    because a record of another scope held its own) found in its exact scope."""
    rec = find_derived(mem, place.id, lambda held: _mine(held, place), embedding)
    if rec is not None:
        return rec
    flt = {"$and": [place.only, {"contact": place.contact}, {"valid_to": None}]}
    found = mem.list(
        CONTACTS,
        limit=4,
        order="asc",
        type=_TYPE,
        filters=flt,
        include_embedding=embedding,
        **place.scope,
    )
    return next((r for r in found if _well_formed(r.metadata)), None)


def _profile(rec: MemoryRecord) -> ContactProfile:
    meta = rec.metadata
    return ContactProfile(
        contact=str(meta["contact"]),
        aliases=tuple(meta.get("aliases", ())),
        platform_ids={src: tuple(ids) for src, ids in meta.get("platform_ids", {}).items()},
        first_seen=float(meta["first_seen"]),
        last_seen=float(meta["last_seen"]),
        message_count=int(meta["message_count"]),
        id=rec.id,
    )


def contact_profile(mem: Memory, event: EventScope) -> ContactProfile | None:
    """The profile of the contact behind ``event`` (any of their linked platform
    identities resolves to the same one), or None if they were never seen."""
    rec = _record(mem, _place(mem, event))
    return None if rec is None else _profile(rec)


def _linked(scopes: SessionScope, event: EventScope) -> list[tuple[str, str]]:
    """The platform identities the contact has: this one, and in the modes that follow
    links, every one linked to the same identity."""
    pairs = [event.contact]
    if event.mode != "per-channel-peer":
        pairs += [k for k, name in scopes.identity_links.items() if name == event.identity]
    return [(p.partition(":")[0], p.partition(":")[2]) for p in pairs]


def record_contact(
    mem: Memory,
    scopes: SessionScope,
    event: EventScope,
    now: float,
    settings: Profiles | None = None,
    count: int = 1,
    names: Sequence[str] = (),
) -> ContactProfile:
    """Counts ``count`` messages from the contact behind ``event``, the last at ``now``:
    creates their profile or rewrites it in place (aliases from ``names`` and
    ``event.name``, platform ids, last seen, message count). Safe beside other writers
    of the same profile (see the module docs): each call's count, aliases and platform
    ids are kept, whoever writes at the same time.

    Raises:
        ConflictError: when other writers changed the profile ``edits.ATTEMPTS`` times
            while this call merged (nothing of this call is stored).
        InvalidArgumentError: when a new profile's ids are all held by records that are
            not it (see the module docs; nothing is stored).
    """
    if not isinstance(scopes, SessionScope) or not isinstance(event, EventScope):
        raise InvalidArgumentError(
            f"scopes and event must be a SessionScope and an EventScope, got "
            f"{shown(scopes)} and {shown(event)}"
        )
    if settings is not None and not isinstance(settings, Profiles):
        raise InvalidArgumentError(f"settings must be a Profiles or None, got {shown(settings)}")
    cfg = settings or Profiles()
    coerce.count(count, "count", 1)
    when = coerce.timestamp(now, "now")
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InvalidArgumentError(f"names must be a list of str, got {shown(names)}")
    seen = [coerce.text(n, f"names[{i}]") for i, n in enumerate(names)]
    if event.name is not None:
        seen.append(event.name)
    place = _place(mem, event)
    linked = _linked(scopes, event)
    for _ in range(edits.ATTEMPTS):
        rec = _record(mem, place, embedding=True)
        meta = _merged({} if rec is None else rec.metadata, place.contact, linked, seen, cfg)
        meta.update(
            first_seen=float(meta.get("first_seen", when)),
            last_seen=max(float(meta.get("last_seen", when)), when),
            message_count=int(meta.get("message_count", 0)) + count,
        )
        meta[_VERSION] = uuid.uuid4().hex
        ids = {s: tuple(v) for s, v in meta["platform_ids"].items()}
        text = _text(place.contact, tuple(meta["aliases"]), ids)
        if rec is None:
            made, new = _create(mem, place, text, meta, when)
            if new:
                return _profile(made)
            continue  # another writer made it first: this count is merged into theirs
        stored = _replace(mem, place, rec, text, meta)
        if stored is not None:
            return _profile(stored)
    raise ConflictError(
        f"the profile of {place.contact!r} was changed by other writers {edits.ATTEMPTS} "
        "times during one update; nothing of this update was stored"
    )


def _create(
    mem: Memory, place: _Place, text: str, meta: dict[str, Any], when: float
) -> tuple[MemoryRecord, bool]:
    """Makes the profile: ``(it, True)``; or ``(theirs, False)`` when another writer made
    it first."""
    profile: dict[str, Any] = {"table": CONTACTS, "type": _TYPE, "metadata": meta}
    return add_derived(
        mem,
        place.id,
        lambda rid: mem.add(text, **profile, created_at=when, id=rid, **place.scope),
        lambda held: _mine(held, place),
        f"the profile of {place.contact!r}",
    )


def _merged(
    old: dict[str, Any],
    contact: str,
    linked: list[tuple[str, str]],
    names: list[str],
    cfg: Profiles,
) -> dict[str, Any]:
    """``old`` (a profile's metadata) with the contact's linked platform ids and the
    names seen (the newest ``cfg.max_aliases``)."""
    meta = dict(old)
    ids: dict[str, list[str]] = {
        src: list(found) for src, found in meta.get("platform_ids", {}).items()
    }
    for src, cid in linked:
        if cid not in ids.setdefault(src, []):
            ids[src].append(cid)
    aliases = list(meta.get("aliases", ()))
    for name in names:
        if name.casefold() not in {a.casefold() for a in aliases}:
            aliases.append(name)
    meta.update(
        contact=contact,
        aliases=aliases[-cfg.max_aliases :],
        platform_ids={src: sorted(found) for src, found in sorted(ids.items())},
    )
    return meta


def _replace(
    mem: Memory, place: _Place, rec: MemoryRecord, text: str, meta: dict[str, Any]
) -> MemoryRecord | None:
    """Stores ``text`` and ``meta`` as the profile ``rec`` (same id) if it is still the
    version read, checked in the transaction that stores them; None when another writer
    got there first (the caller merges again)."""
    read = rec.metadata.get(_VERSION)
    # A profile kept before versions were recorded has none.
    version = {_VERSION: {"$exists": False}} if read is None else {_VERSION: read}
    item: dict[str, Any] = {
        "text": text,
        "id": rec.id,
        "table": CONTACTS,
        "type": _TYPE,
        "metadata": meta,
        "created_at": rec.created_at,
        "importance": rec.importance,
        "evergreen": rec.evergreen,
        **place.scope,
    }
    if text == rec.text and rec.embedding is not None:
        item["embedding"] = rec.embedding  # the same text: no need to embed it again
    flt = {"$and": [place.only, {"id": rec.id}, version]}
    try:
        gone, stored = mem.replace([item], CONTACTS, type=_TYPE, filters=flt, **place.scope)
    except InvalidArgumentError:
        # The filter left the profile in place (another version), whose id the new one
        # then cannot take; unless the item itself was refused.
        now = _record(mem, place)
        if now is not None and now.id == rec.id and now.metadata.get(_VERSION) == read:
            raise
        return None
    if gone:
        return stored[0]
    # Deleted since it was read: the replace stored it again, from what was deleted.
    # Unless another writer merged into that meanwhile, it goes, and the next pass
    # makes the profile anew.
    mine = {"$and": [place.only, {"id": rec.id}, {_VERSION: meta[_VERSION]}]}
    if mem.delete_all(CONTACTS, type=_TYPE, filters=mine, **place.scope):
        return None
    return stored[0]
