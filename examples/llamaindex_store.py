"""memlane as a LlamaIndex vector store: default, text and hybrid queries, offline.

Needs the extra: pip install "memlane[llamaindex]".
Run: python examples/llamaindex_store.py
"""

from __future__ import annotations

from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from memlane.integrations.llamaindex import MemlaneVectorStore


def main() -> None:
    # Nodes without embeddings are embedded by memlane's offline model.
    with MemlaneVectorStore(scope={"agent_id": "docs-bot"}) as store:
        store.add(
            [
                TextNode(text="Deploys use the blue-green script in ops/", metadata={"year": 2024}),
                TextNode(text="Backups run nightly at 02:00 UTC", metadata={"year": 2023}),
                TextNode(text="The staging cluster has three nodes", metadata={"year": 2024}),
            ]
        )
        for mode in (
            VectorStoreQueryMode.DEFAULT,
            VectorStoreQueryMode.TEXT_SEARCH,
            VectorStoreQueryMode.HYBRID,
        ):
            result = store.query(
                VectorStoreQuery(
                    query_str="how do we deploy a release?", similarity_top_k=1, mode=mode
                )
                if mode != VectorStoreQueryMode.TEXT_SEARCH
                else VectorStoreQuery(query_str="blue-green script", similarity_top_k=1, mode=mode)
            )
            assert result.nodes and result.similarities
            print(f"{mode.value:12} {result.similarities[0]:.3f}  {result.nodes[0].get_content()}")
            assert result.nodes[0].get_content().startswith("Deploys")

        recent = MetadataFilters(
            filters=[MetadataFilter(key="year", value=2024, operator=FilterOperator.GTE)]
        )
        result = store.query(
            VectorStoreQuery(query_str="when do backups run?", similarity_top_k=3, filters=recent)
        )
        assert result.nodes is not None
        print("2024 only:", [n.get_content() for n in result.nodes])
        assert all(n.metadata["year"] == 2024 for n in result.nodes)


if __name__ == "__main__":
    main()
