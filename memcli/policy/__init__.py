"""What may be stored, and how: categories and allowlists, secret redaction, the one redaction
path of every record, encryption at rest and its key."""
