"""The trust suites: stress, crash (`kill -9`) and fuzz."""
