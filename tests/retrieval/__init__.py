"""Queries and context bundles: legs, scopes, stages, the PRD's acceptance scenarios."""
