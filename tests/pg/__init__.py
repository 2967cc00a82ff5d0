"""PostgreSQL: the engine on a real server (skipped without the `pg` extra)."""
