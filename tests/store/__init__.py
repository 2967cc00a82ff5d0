"""The store: both engines' shared surface, SQLite's file, locations, locks, rebuild."""
