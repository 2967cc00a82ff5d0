"""The docs site's own tools (`python -m docs.gen` writes the generated references)."""
