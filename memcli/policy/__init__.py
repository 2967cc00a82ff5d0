"""What may be stored, and how: categories and allowlists, secret redaction, the one redaction
path of every record, the sensitivities a write may carry, encryption at rest. Leaf rules: the
store and every domain package apply them, and they import nothing of either."""
