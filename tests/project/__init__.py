"""The repository itself: layers, docs, completions, the tests' shared code."""
