"""Redaction's share of a deferred import's CPU, before and after, in the same run.

    python -m bench.secrets_import --data /path/to/locomo10.json [--before main]

The 5,882 LoCoMo turns are written to a temporary Claude export (272 conversations), and
`memcli import --from claude FILE --defer-embed` runs under cProfile in a child process, once
with this checkout's memcli and once with `--before`'s (extracted with `git archive` into the
temporary folder and put first on PYTHONPATH), each into a fresh database. Printed: the import's
profiled CPU seconds, the cumulative seconds in `redact_event` (the one call that redacts an
ingested record), and their ratio. cProfile slows Python calls, so the seconds are inflated;
the shares and the before/after ratio are what to read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from bench.locomo_data import DEFAULT_DATA
from bench.secrets import REPO

CHILD = """
import cProfile, pstats, sys
from memcli.cli.entry import main
profile = cProfile.Profile()
sys.argv = ["memcli", "import", "--from", "claude", sys.argv[1], "--defer-embed", "--json"]
profile.enable()
try:
    main()
except SystemExit:
    pass
profile.disable()
stats = pstats.Stats(profile)
redact = max((v[3] for k, v in stats.stats.items()
              if k[2] == "redact_event" and "redaction" in k[0]), default=0.0)
print(f"{stats.total_tt} {redact}", file=sys.stderr)
"""


def export_file(data: Path, folder: Path) -> Path:
    """The LoCoMo sessions as a Claude export: one conversation per session."""
    convs = []
    for n, sample in enumerate(json.loads(data.read_text())):
        for key, session in sample["conversation"].items():
            if not (key.startswith("session_") and isinstance(session, list)):
                continue
            convs.append(
                {
                    "uuid": f"c{n}-{key}",
                    "name": key,
                    "created_at": "2024-03-01T09:00:00Z",
                    "chat_messages": [
                        {
                            "uuid": f"{n}-{key}-{i}",
                            "sender": "human" if i % 2 == 0 else "assistant",
                            "text": t["text"],
                            "content": [{"type": "text", "text": t["text"]}],
                            "created_at": f"2024-03-01T09:{i // 60 % 60:02d}:{i % 60:02d}Z",
                        }
                        for i, t in enumerate(session)
                    ],
                }
            )
    path = folder / "claude.json"
    path.write_text(json.dumps(convs))
    return path


def extract(rev: str, folder: Path) -> Path:
    """`rev`'s memcli package alone (so bench/ and tests/ stay this checkout's)."""
    tar = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "memcli"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as archive:
        archive.extractall(folder, filter="data")
    return folder


def profile(source: Path, folder: Path, name: str, path_first: Path | None) -> tuple[float, float]:
    home = folder / name
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCLI_")}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        MEMCLI_DB=str(home / "m.db"),
        MEMCLI_AUTOSTART="0",
        MEMCLI_EMBEDDER="hash",
    )
    if path_first is not None:
        env["PYTHONPATH"] = str(path_first)
    else:
        env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(source)],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    total, redact = map(float, done.stderr.strip().splitlines()[-1].split())
    return total, redact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--before", default="main", help="the git revision measured as before")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memcli-secrets-import-") as tmp:
        folder = Path(tmp)
        source = export_file(args.data, folder)
        old = extract(args.before, folder / "before-src")
        rows = {
            "before": profile(source, folder, "before", old),
            "after": profile(source, folder, "after", None),
        }
    print("| memcli | import CPU s (profiled) | in redact_event s | share |")
    print("|---|---|---|---|")
    for name, (total, redact) in rows.items():
        label = f"before ({args.before})" if name == "before" else "after (this checkout)"
        print(f"| {label} | {total:.1f} | {redact:.1f} | {redact / total:.0%} |")
    ratio = rows["after"][1] / rows["before"][1]
    print(f"\nredaction seconds, after / before: {ratio:.2f}")


if __name__ == "__main__":
    main()
