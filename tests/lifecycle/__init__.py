"""A memory's life: consolidation, decay, reflection, proposals, purge, the ledger."""
