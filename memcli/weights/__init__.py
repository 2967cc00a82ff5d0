"""Model weights shipped inside the package, read with importlib.resources (no code here)."""
