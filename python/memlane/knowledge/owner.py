"""Whose knowledge a document is: shared (every agent's) or one agent's own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlane import coerce
from memlane.errors import InvalidArgumentError, shown
from memlane.knowledge.documents import DOCUMENTS
from memlane.scoping import scope_of

if TYPE_CHECKING:
    from memlane.records import MemoryRecord

__all__ = ["Owner"]


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose knowledge: shared (every agent's) or one agent's own."""

    agent_id: str | None
    shared: bool

    @classmethod
    def of(cls, agent_id: object, shared: object) -> Owner:
        """The owner a call names."""
        if not isinstance(shared, bool):
            raise InvalidArgumentError(f"shared must be a bool, got {type(shared).__name__}")
        if agent_id is not None and (not isinstance(agent_id, str) or not agent_id.strip()):
            raise InvalidArgumentError(f"agent_id must be a non-empty str, got {shown(agent_id)}")
        if agent_id is not None:  # every record stores it: refused here, not mid-ingest
            coerce.clean(agent_id, "agent_id")
        if not shared and agent_id is None:
            raise InvalidArgumentError(
                "private knowledge (shared=False) needs an agent_id; pass shared=True for "
                "knowledge every agent may read"
            )
        return cls(None if shared else agent_id, shared)

    @classmethod
    def writing(cls, agent_id: object, shared: object, default_scope: Mapping[str, str]) -> Owner:
        """The owner of knowledge an ingest writes into a store of ``default_scope``: an
        agent's own knowledge only where the default scope names that agent or none
        (a read of another agent's sees the shared knowledge, as before)."""
        owner = cls.of(agent_id, shared)
        bound = default_scope.get("agent_id")
        if owner.agent_id is not None and bound is not None and owner.agent_id != bound:
            # Every read there asks for that agent: what ingest wrote for another could
            # never be found, listed or removed.
            raise InvalidArgumentError(
                f"agent_id {shown(agent_id)} is not this store's: its default_scope is "
                f"agent {shown(bound)} (open the store without agent_id in default_scope "
                "to keep several agents' knowledge)"
            )
        return owner

    def filter(self) -> dict[str, Any]:
        """Metadata filter of this scope's documents and fragments."""
        if self.shared:
            return {"shared": True}
        return {"shared": False, "agent_id": self.agent_id}

    def holds(self, record: MemoryRecord, default_scope: Mapping[str, str]) -> bool:
        """Whether ``record`` is a document of this owner's, its scope as ingest writes
        it in a store of ``default_scope`` (``documents.knowledge_only``)."""
        return (
            record.table == DOCUMENTS
            and record.metadata.get("shared") is self.shared
            and record.metadata.get("agent_id") == self.agent_id
            and record.scope == scope_of(default_scope, {"agent_id": self.agent_id})
        )
