"""Ingest: prepare a batch of event records (parse, redact, chunk, embed), then write it."""
