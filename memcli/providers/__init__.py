"""Providers: embedders (and later LLM clients) behind small Protocols."""
