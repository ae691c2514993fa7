"""memlane: persistent, searchable memory for AI agents, with a Rust engine."""

from __future__ import annotations

from memlane._core import BM25Index, HnswIndex, __version__, analyze
from memlane.agent import (
    LLM,
    AgentMemory,
    CoreMemory,
    MemoryTools,
    OpenAIChat,
    SessionScope,
    build_context,
    consolidate,
    reflect,
    thread_context,
)
from memlane.aio import AsyncMemory
from memlane.embeddings import (
    E5SmallEmbedder,
    Embedder,
    OnnxEmbedder,
    OpenAIEmbedder,
    PotionEmbedder,
)
from memlane.errors import (
    ClosedError,
    ConflictError,
    CorruptFileError,
    DimensionMismatchError,
    DuplicateIdError,
    EmbedderMismatchError,
    EmbedderUnavailableError,
    InternalError,
    InvalidArgumentError,
    MemlaneError,
    NotFoundError,
    StorageError,
    StoreClosedError,
    StoreLockedError,
    UnknownIdError,
)
from memlane.knowledge import DocumentLoadError, IngestReport, KnowledgeWatch
from memlane.memory import Memory
from memlane.records import MemoryRecord, MemoryVersion, SearchHit

__all__ = [
    "LLM",
    "AgentMemory",
    "AsyncMemory",
    "BM25Index",
    "ClosedError",
    "ConflictError",
    "CoreMemory",
    "CorruptFileError",
    "DimensionMismatchError",
    "DocumentLoadError",
    "DuplicateIdError",
    "E5SmallEmbedder",
    "Embedder",
    "EmbedderMismatchError",
    "EmbedderUnavailableError",
    "HnswIndex",
    "IngestReport",
    "InternalError",
    "InvalidArgumentError",
    "KnowledgeWatch",
    "MemlaneError",
    "Memory",
    "MemoryRecord",
    "MemoryTools",
    "MemoryVersion",
    "NotFoundError",
    "OnnxEmbedder",
    "OpenAIChat",
    "OpenAIEmbedder",
    "PotionEmbedder",
    "SearchHit",
    "SessionScope",
    "StorageError",
    "StoreClosedError",
    "StoreLockedError",
    "UnknownIdError",
    "__version__",
    "analyze",
    "build_context",
    "consolidate",
    "reflect",
    "thread_context",
]
