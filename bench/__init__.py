"""memcli's benchmarks, run as `python -m bench.<name>` from the repository root.

A benchmark measures what it says it measures: no `memcli` process it starts starts a daemon by
itself (warm by default, docs/guides/daemon.md), unless the benchmark asks for it
(bench/service.py measures that path).
"""

import os

os.environ.setdefault("MEMCLI_AUTOSTART", "0")
