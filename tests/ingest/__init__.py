"""Ingest: input shapes, batches, chunking, entities, roles, the dense and sparse passes."""
