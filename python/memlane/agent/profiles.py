"""Contact profiles (as OrcBot keeps them): who the agent talks to, under which names and
on which platforms, since when and how often.

One record per canonical contact in the ``contacts`` table, in the contact's memory
scope, updated in place (``update``) by
``after`` at each turn the contact speaks. The record's
text names the contact, its aliases and platform ids (so a search finds it by any of
them); its ``metadata`` holds the profile's fields. The text changes (and is embedded
again) only when a new alias or platform id appears, not at every message.

"The contact" is the person the scope mode keys memory by: the canonical identity
(after the ``SessionScope``'s identity links) in ``"main"`` and
``"per-peer"`` modes, the raw platform identity in ``"per-channel-peer"`` mode, where
links are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlane import coerce, times
from memlane.scoping import EventScope, SessionScope

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["CONTACTS", "ContactProfile", "Profiles", "contact_profile", "record_contact"]

#: The table contact profiles live in.
CONTACTS = "contacts"


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


def _record(mem: Memory, event: EventScope) -> MemoryRecord | None:
    scope: dict[str, Any] = dict(event.fields)
    found = mem.list(CONTACTS, limit=1, order="asc", filters={"contact": _key(event)}, **scope)
    return found[0] if found else None


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
    rec = _record(mem, event)
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
    creates their profile or updates it in place (aliases from ``names`` and
    ``event.name``, platform ids, last seen, message count). Callers serialise calls for
    one contact (``AgentMemory`` holds its lock); two processes updating one profile at
    once may lose one count."""
    cfg = settings or Profiles()
    ids: dict[str, list[str]] = {}
    rec = _record(mem, event)
    meta: dict[str, Any] = {} if rec is None else dict(rec.metadata)
    for src, found in meta.get("platform_ids", {}).items():
        ids[src] = list(found)
    for src, cid in _linked(scopes, event):
        if cid not in ids.setdefault(src, []):
            ids[src].append(cid)
    aliases = list(meta.get("aliases", ()))
    for name in [*names, *([] if event.name is None else [event.name])]:
        if name.casefold() not in {a.casefold() for a in aliases}:
            aliases.append(name)
    aliases = aliases[-cfg.max_aliases :]
    platform_ids = {src: sorted(found) for src, found in sorted(ids.items())}
    meta.update(
        contact=_key(event),
        aliases=aliases,
        platform_ids=platform_ids,
        first_seen=float(meta.get("first_seen", now)),
        last_seen=max(float(meta.get("last_seen", now)), now),
        message_count=int(meta.get("message_count", 0)) + count,
    )
    text = _text(meta["contact"], tuple(aliases), {s: tuple(v) for s, v in platform_ids.items()})
    if rec is None:
        scope: dict[str, Any] = dict(event.fields)
        rec = mem.add(text, table=CONTACTS, type="profile", metadata=meta, created_at=now, **scope)
    else:
        rec = mem.update(rec.id, text=None if text == rec.text else text, metadata=meta)
    return _profile(rec)
