"""Knowledge: documents ingested into searchable fragments, as elizaOS agents use them.

The methods live on [`Memory`][memlane.Memory]
([`ingest`][memlane.Memory.ingest], [`ingest_config`][memlane.Memory.ingest_config],
[`ingest_text`][memlane.Memory.ingest_text], [`watch`][memlane.Memory.watch],
[`search_knowledge`][memlane.Memory.search_knowledge],
[`search_documents`][memlane.Memory.search_documents],
[`list_documents`][memlane.Memory.list_documents],
[`get_fragments`][memlane.Memory.get_fragments],
[`remove_document`][memlane.Memory.remove_document],
[`clear_knowledge`][memlane.Memory.clear_knowledge]; their work is done in
``memlane.knowledge.api``). This package holds their parts: loaders, chunkers, ids,
the pipeline and its report.
"""

from __future__ import annotations

from memlane.knowledge.api import (
    DOCUMENT_THRESHOLD,
    FRAGMENT_THRESHOLD,
    SEARCH_DEFAULTS,
    Threshold,
)
from memlane.knowledge.chunking import (
    Chunk,
    Chunker,
    MarkdownSplitter,
    RecursiveCharacterSplitter,
    TokenSplitter,
)
from memlane.knowledge.documents import DOCUMENTS, FRAGMENTS
from memlane.knowledge.ids import document_id, fragment_id, normalise_path
from memlane.knowledge.loaders import (
    LOADERS,
    DocumentLimitError,
    DocumentLoadError,
    IngestLimits,
    LoadedDocument,
    Loader,
    loader_for,
    register_loader,
)
from memlane.knowledge.report import IngestReport
from memlane.knowledge.watch import KnowledgeWatch

__all__ = [
    "DOCUMENTS",
    "DOCUMENT_THRESHOLD",
    "FRAGMENTS",
    "FRAGMENT_THRESHOLD",
    "LOADERS",
    "SEARCH_DEFAULTS",
    "Chunk",
    "Chunker",
    "DocumentLimitError",
    "DocumentLoadError",
    "IngestLimits",
    "IngestReport",
    "KnowledgeWatch",
    "LoadedDocument",
    "Loader",
    "MarkdownSplitter",
    "RecursiveCharacterSplitter",
    "Threshold",
    "TokenSplitter",
    "document_id",
    "fragment_id",
    "loader_for",
    "normalise_path",
    "register_loader",
]
