"""Adapters that plug ``memlane.Memory`` into agent frameworks.

Each lives in its own module and needs its framework, installed by an extra:

- ``memlane.integrations.langchain`` (``pip install "memlane[langchain]"``): a
  ``VectorStore``, a hybrid ``BaseRetriever`` and an ``Embeddings``;
- ``memlane.integrations.langgraph`` (``memlane[langgraph]``): a ``BaseStore``
  for a graph's long-term memory;
- ``memlane.integrations.llamaindex`` (``memlane[llamaindex]``): a
  ``BasePydanticVectorStore``.

An adapter bound to a scope (``scope={"agent_id": ..., "user_id": ...}``) writes
every record with that scope and reads only records of it: memlane's scopes stay
hard partitions whatever the framework asks.
"""
