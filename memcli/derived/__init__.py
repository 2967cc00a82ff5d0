"""Derived memories (facts, summaries, decisions ...): the one writer they go through, the rules
their text follows, the metered model that writes them, and the app memory limit with its
compaction."""
