"""Other tools' exports and memcli's own export/import."""
