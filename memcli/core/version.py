"""memcli's version, in the bottom layer so that any module may name it (an export's header
does) without importing the library's front door, `memcli/__init__.py`, which sits on top."""

__version__ = "0.1.0"
