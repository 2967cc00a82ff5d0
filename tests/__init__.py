"""memcli's tests: a package, so that `tests.support` imports the same way from tests and bench."""
