"""The ledger a context bundle reads from: decisions and tasks, their rows from events, and
checkpoints."""
