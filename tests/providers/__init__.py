"""Models and clients: embedders, SPLADE, tokens, the LLM client, query batching."""
