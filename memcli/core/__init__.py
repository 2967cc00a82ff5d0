"""Leaf helpers with no domain knowledge: ids, tokens, chunking, progress callbacks, input
parsing, and the records that go in and come out (event records, hits, reports)."""
