"""Duplicate detection for :meth:`memlane.Memory.add`.

- Exact: the same :func:`content_hash` in the same table and scope.
- Near: a cosine similarity at or above a threshold (0.95 by default) in the
  same table and scope, as elizaOS's ``createMemory(unique=true)`` checks.
- Window (OrcBot's semantics): within ``dedup_window`` seconds (5 minutes by
  default), the same event delivered again: the same ``metadata["messageId"]``
  (or ``message_id``), ``metadata["eventId"]`` or ``metadata["statusMessageId"]``,
  each a key of its own, so a redelivered event is one memory even if its text
  differs; or the same ``metadata["source"]`` and contact (``metadata["sourceId"]``
  or ``metadata["contact"]``) with the same text. A contact's other messages are
  never skipped. All in the same table and scope.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DedupWindow", "content_hash", "legacy_key", "normalise_text", "window_keys"]

#: Metadata fields that name one delivery, and the window key kind of each. Both
#: spellings of a message id share the kind "message", the key stores have written
#: since the window began.
_ID_KEYS = (
    ("messageId", "message"),
    ("message_id", "message"),
    ("eventId", "eventId"),
    ("statusMessageId", "statusMessageId"),
)
#: Metadata fields naming the contact a message came from (OrcBot's ``sourceId``).
_CONTACT_KEYS = ("sourceId", "contact")
#: A key kind earlier versions wrote for ``sourceId`` (taken then as an event id): a
#: store's remembered keys of this kind are derived again at open (:func:`legacy_key`).
_LEGACY_KIND = "sourceId"


def normalise_text(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed and stripped: what "the same content" compares."""
    if text.isascii():  # NFKC leaves ASCII as it is, and casefold is lower there
        return " ".join(text.lower().split())
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.casefold().split())


def content_hash(text: str) -> str:
    """sha256 (hex) of :func:`normalise_text`."""
    return hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()


def window_keys(scope_key: Sequence[Any], metadata: Mapping[str, Any], digest: str) -> list[str]:
    """The keys (JSON strings) under which a record is remembered by :class:`DedupWindow`."""
    keys: list[str] = []
    for field, kind in _ID_KEYS:
        value = metadata.get(field)
        if value is not None:
            key = json.dumps([kind, list(scope_key), str(value)])
            if key not in keys:
                keys.append(key)
    source = metadata.get("source")
    if source is not None:
        for field in _CONTACT_KEYS:
            contact = metadata.get(field)
            if contact is not None:
                key = json.dumps(["source", list(scope_key), str(source), str(contact), digest])
                if key not in keys:
                    keys.append(key)
    return keys


def legacy_key(key: str) -> bool:
    """Whether ``key`` is of the kind earlier versions wrote for ``sourceId``: such a key
    must not be matched (it would skip a contact's every later message) but replaced by
    the record's :func:`window_keys`."""
    return key.startswith(f'["{_LEGACY_KIND}",')


class DedupWindow:
    """Remembers recently added records under their :func:`window_keys` for ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        while self._entries:
            key, (_, at) = next(iter(self._entries.items()))
            if now - at <= self.seconds:
                break
            del self._entries[key]

    def find(self, keys: list[str], now: float | None = None) -> str | None:
        """The id of a record remembered under any of ``keys`` within the window."""
        if self.seconds <= 0 or not keys:
            return None
        now = time.time() if now is None else now
        with self._lock:
            self._expire(now)
            for key in keys:
                hit = self._entries.get(key)
                if hit is not None:
                    return hit[0]
        return None

    def remember(self, keys: list[str], record_id: str, at: float | None = None) -> None:
        if self.seconds <= 0 or not keys:
            return
        at = time.time() if at is None else at
        with self._lock:
            for key in keys:
                self._entries[key] = (record_id, at)
                self._entries.move_to_end(key)

    def forget(self, record_id: str) -> None:
        with self._lock:
            for key in [k for k, (rid, _) in self._entries.items() if rid == record_id]:
                del self._entries[key]
