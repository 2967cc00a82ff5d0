"""Lifecycle commands: each computes a plan, then applies it (so --dry-run prints the plan)."""
