"""Model weights shipped inside the package, read as files by memcli.providers.splade."""
