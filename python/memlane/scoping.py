"""Scopes: which records a call reads and writes.

A call's scope is the store's ``default_scope`` with the scope fields the call gives
over it (``scope_of``). A search or list given ``agent_id="a"`` also sees records
stored with ``agent_id="a", user_id="u"``: a scope field left out is not a constraint.
Core memory blocks and long-term notes belong to exactly one scope (an agent's persona
is not a user's), so their reads and replacements add a filter that the other scope
fields are unset (``exact_scope``).

Session scoping (``SessionScope``): a platform event (source, contact, chat)
becomes the scope of every store call of an agent's turn, in one of three modes, as
multi-platform agents (OrcBot, OpenClaw) key their sessions:

``"main"``
    one shared memory for everyone the agent talks to (a personal assistant
    with a single owner);
``"per-peer"``
    one memory per person: ``identity_links`` map platform identities
    (``"telegram:123"``, ``"whatsapp:+1555"``) to one canonical name, so the
    same person on two platforms shares memory;
``"per-channel-peer"``
    one memory per platform identity: links are ignored, the same person on
    two platforms has two memories.

The room (``"<source>:<chat id>"``) is never part of the memory scope, so a
person's memories follow them between chats; it scopes the message history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from memlane import coerce
from memlane.errors import InvalidArgumentError, shown
from memlane.records import SCOPE_FIELDS, ScopeFields

__all__ = [
    "AGENT_FIELDS",
    "EventScope",
    "Scope",
    "ScopeFields",
    "ScopeMode",
    "Scoped",
    "SessionScope",
    "agents_apart",
    "exact_scope",
    "scope_kwargs",
    "scope_of",
]


@dataclass(frozen=True, slots=True)
class Scope:
    """A call's scope as one value: the store's ``default_scope`` with the fields the call
    gave over it (``Scope.of``), each a non-empty str or unset."""

    agent_id: str | None = None
    user_id: str | None = None
    room_id: str | None = None
    world_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None

    @classmethod
    def of(cls, default: Mapping[str, str], given: Mapping[str, object]) -> Scope:
        """The scope of a call given ``given`` (its scope keywords) over ``default``. A
        value that is no str is an ``InvalidArgumentError``; an unknown keyword a
        ``TypeError``, as Python's own for a misspelt keyword argument."""
        unknown = set(given) - _FIELDS
        if unknown:
            raise TypeError(
                f"unexpected keyword argument(s) {', '.join(sorted(map(repr, unknown)))}; "
                f"the scope keywords are {', '.join(SCOPE_FIELDS)}"
            )
        return cls(**scope_of(default, given))

    @property
    def fields(self) -> dict[str, str]:
        """The fields that are set, in the engine's order."""
        return {f: v for f in SCOPE_FIELDS if (v := getattr(self, f)) is not None}


_FIELDS = frozenset(SCOPE_FIELDS)


class Scoped(Protocol):
    """What ``exact_scope`` reads of a store: its default scope."""

    @property
    def default_scope(self) -> Mapping[str, str]: ...


def scope_of(default: Mapping[str, str], given: Mapping[str, object]) -> dict[str, str]:
    """A call's scope: the store's default scope with the fields the call gives over it."""
    out = dict(default)
    for f, v in given.items():
        if v is not None:
            out[f] = coerce.text(v, f)
    return out


def scope_kwargs(scope: Mapping[str, str] | None) -> dict[str, Any]:
    """A scope as the keyword arguments of a store call (typed Any: they go as ``**kwargs``
    beside keywords of other types)."""
    if scope is None:
        return {}
    if not isinstance(scope, Mapping):
        raise InvalidArgumentError(f"scope must be a mapping of scope fields, got {shown(scope)}")
    return dict(scope)


def exact_scope(mem: Scoped, scope: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scope as stored (the store's ``default_scope`` under the fields given) and the
    filter that matches it exactly (every other scope field unset).

    The scope's values are str; it is typed Any because it is passed as ``**kwargs``
    to calls whose other keywords have other types."""
    if not isinstance(scope, Mapping):
        raise InvalidArgumentError(f"scope must be a dict of scope fields, got {shown(scope)}")
    unknown = set(scope) - set(SCOPE_FIELDS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown scope field(s) {sorted(map(str, unknown))}; scope fields are "
            f"{list(SCOPE_FIELDS)}"
        )
    full: dict[str, Any] = scope_of(mem.default_scope, scope)
    return full, {f: None for f in SCOPE_FIELDS if f not in full}


#: The scope fields that tell one agent's records from another's.
AGENT_FIELDS = ("agent_id", "namespace")


def agents_apart(
    mem: Scoped, scope: Mapping[str, Any], filters: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """``filters``, leaving out too the records of agents (an ``agent_id`` or a
    ``namespace`` set) when ``scope`` (the store's ``default_scope`` under it) names
    none: an agent without them is an agent of its own, which neither reads nor changes
    another's, while the scopes under its own (a room's, a session's) stay in. A scope
    that names an agent reads that agent's records by prefix, as a search does."""
    full = scope_of(mem.default_scope, scope)
    if any(f in full for f in AGENT_FIELDS):
        return None if filters is None else dict(filters)
    apart = dict.fromkeys(AGENT_FIELDS)
    return apart if not filters else {"$and": [dict(filters), apart]}


ScopeMode = Literal["main", "per-peer", "per-channel-peer"]
_MODES = ("main", "per-peer", "per-channel-peer")


#: Int ids are refused past 128 bits (platform ids are 64-bit, a UUID as an int is
#: 128): Python will not write an int of thousands of digits as a str, and no platform
#: has such ids. A longer id can be given as a str.
_INT_ID_BITS = 128
#: The longest platform id or display name, in characters: an agent's upkeep job keeps
#: the event it runs for, and a job record must stay small (``upkeep/jobs.py``).
MAX_PLATFORM_TEXT = 4096


def platform_id(value: object, label: str) -> str:
    """A platform's id or name: a non-empty str (or an int of at most 128 bits), stripped."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _INT_ID_BITS:
            raise InvalidArgumentError(
                f"{label} is an int of {value.bit_length()} bits; int ids must fit in "
                f"{_INT_ID_BITS} bits (give a longer id as a str)"
            )
        value = str(int(value))
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{label} must be a non-empty str (or int), got {shown(value)}")
    # Refused here, before a turn is stored: the store refuses it later, in a write
    # that a turn stored already cannot take back (a profile's count).
    return _bounded(coerce.clean(value.strip(), label), label)


def _bounded(value: str, label: str) -> str:
    if len(value) > MAX_PLATFORM_TEXT:
        raise InvalidArgumentError(
            f"{label} is {len(value)} characters long: at most {MAX_PLATFORM_TEXT}"
        )
    return value


def source_id(value: object) -> str:
    """A platform's name as identities spell it: lowercased, and without ":", which
    separates it from the contact id in ``"<source>:<contact id>"``. Contact ids may hold
    ":" (Matrix's ``@alice:example.org``), so with a ":" in the source ``("a:b", "c")``
    and ``("a", "b:c")`` would be one identity: two contacts sharing one memory that
    nobody linked."""
    src = platform_id(value, "source").lower()
    if ":" in src:
        raise InvalidArgumentError(f"source must not contain ':', got {shown(value)}")
    return src


@dataclass(frozen=True, slots=True)
class EventScope:
    """What one platform event resolves to.

    ``fields`` are the scope keyword arguments for memory calls
    (``mem.add(text, **scope.fields)``); ``room_id`` scopes the message history;
    ``identity`` is the canonical person (after identity links) and ``contact``
    the raw ``"<source>:<contact id>"``; ``name`` is the display name the platform
    gave the sender, when it gave one (kept as an alias in the contact's profile);
    ``message_id`` is the platform's id of the message the event delivers, when it
    gave one: the message is stored once however often it is delivered.
    """

    fields: dict[str, str]
    identity: str
    contact: str
    source: str
    room_id: str | None = None
    mode: ScopeMode = "per-peer"
    name: str | None = None
    message_id: str | None = None

    @property
    def history(self) -> dict[str, str]:
        """Scope fields of the room's message history (the memory scope plus the room)."""
        out = dict(self.fields)
        if self.room_id is not None:
            out["room_id"] = self.room_id
        return out


class SessionScope:
    """Maps platform events to memory scopes.

    Args:
        mode: ``"main"``, ``"per-peer"`` or ``"per-channel-peer"`` (see the module docs).
        identity_links: ``{"<source>:<contact id>": "<canonical name>"}``. The source is
            matched without case, the contact id exactly; a key with an empty part or
            blanks around the ``":"``, or two keys for one contact naming different
            people, is refused (such a link would never apply, or merge the contact
            into the wrong person).
        agent_id: set on every scope, so agents sharing a store stay apart.
        namespace: set on every scope when given.
    """

    def __init__(
        self,
        mode: ScopeMode = "per-peer",
        identity_links: Mapping[str, str] | None = None,
        *,
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> None:
        if mode not in _MODES:
            raise InvalidArgumentError(
                f"mode must be one of {{'main', 'per-peer', 'per-channel-peer'}}, got {shown(mode)}"
            )
        self.mode: ScopeMode = mode
        self.identity_links = _links(identity_links)
        self.agent_id = None if agent_id is None else platform_id(agent_id, "agent_id")
        self.namespace = None if namespace is None else platform_id(namespace, "namespace")

    def identity(self, source: str, contact_id: str | int) -> str:
        """The canonical person behind a platform identity (the link, or ``"<source>:<id>"``)."""
        contact = f"{source_id(source)}:{platform_id(contact_id, 'contact_id')}"
        return self.identity_links.get(contact, contact)

    def resolve(
        self,
        source: str,
        contact_id: str | int,
        chat_id: str | int | None = None,
        *,
        name: str | None = None,
        message_id: str | int | None = None,
    ) -> EventScope:
        """The scope of an event from ``contact_id`` on ``source`` (in chat ``chat_id``);
        ``source`` has no ``":"`` (it separates the source from the contact id, which
        may hold one); ids are str or ints of at most 128 bits; ``name``: the sender's
        display name on the platform, if it gave one (ids and name at most
        ``MAX_PLATFORM_TEXT`` characters); ``message_id``: the platform's id of
        the message, if it gave one."""
        src = source_id(source)
        if name is not None:
            if not isinstance(name, str) or not name.strip():
                raise InvalidArgumentError(f"name must be a non-empty str, got {shown(name)}")
            name = _bounded(coerce.clean(" ".join(name.split()), "name"), "name")
        contact = f"{src}:{platform_id(contact_id, 'contact_id')}"
        identity = self.identity_links.get(contact, contact)
        fields: dict[str, str] = {}
        if self.agent_id is not None:
            fields["agent_id"] = self.agent_id
        if self.namespace is not None:
            fields["namespace"] = self.namespace
        if self.mode == "main":
            fields["session_id"] = "main"
        elif self.mode == "per-peer":
            fields["user_id"] = identity
            fields["session_id"] = f"peer:{identity}"
        else:
            fields["user_id"] = contact
            fields["session_id"] = f"channel-peer:{contact}"
        room = None if chat_id is None else f"{src}:{platform_id(chat_id, 'chat_id')}"
        mid = None if message_id is None else platform_id(message_id, "message_id")
        return EventScope(fields, identity, contact, src, room, self.mode, name, mid)

    def __call__(
        self, source: str, contact_id: str | int, chat_id: str | int | None = None
    ) -> dict[str, str]:
        """The memory scope fields of an event (``resolve(...).fields``)."""
        return self.resolve(source, contact_id, chat_id).fields

    def __repr__(self) -> str:
        return f"SessionScope(mode={self.mode!r}, identity_links={len(self.identity_links)})"


def _links(identity_links: object) -> dict[str, str]:
    """``identity_links`` as ``SessionScope`` keeps them: each key as ``resolve`` spells
    the contact (the source lowercased), so that every link given is one applied."""
    if identity_links is None:
        return {}
    if not isinstance(identity_links, Mapping):
        raise InvalidArgumentError(
            "identity_links must be a dict of '<source>:<contact id>' -> canonical name, "
            f"got {type(identity_links).__name__}"
        )
    links: dict[str, str] = {}
    for key, name in identity_links.items():
        k = platform_id(key, "identity_links key")
        source, colon, contact = k.partition(":")
        if not colon or not source or not contact:
            raise InvalidArgumentError(
                f"identity_links keys are '<source>:<contact id>', neither part empty, "
                f"got {shown(key)}"
            )
        # resolve strips the source and the contact id, so a part with blanks around it
        # would name no contact ever seen: the link would be silently never applied.
        if source != source.strip() or contact != contact.strip():
            raise InvalidArgumentError(
                f"identity_links key {shown(key)} has blanks around the ':'; "
                "write it as '<source>:<contact id>'"
            )
        contact = f"{source.lower()}:{contact}"
        person = platform_id(name, f"identity_links[{shown(key)}]")
        earlier = links.setdefault(contact, person)
        # Two spellings of one contact ("Telegram:1", "telegram:1"): keeping either
        # would merge the contact into the wrong person.
        if earlier != person:
            raise InvalidArgumentError(
                f"identity_links name two people for {contact!r}: {earlier!r} and "
                f"{person!r} (keys that differ only in the source's case are one contact)"
            )
    return links
