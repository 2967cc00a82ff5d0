"""Entities: extraction from text, their types, and an entity's profile."""
