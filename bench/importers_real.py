"""`memcli import --from FORMAT` of each real file in tests/fixtures/real/ (exports and
transcripts written by the real tools, from the test data of public projects: their README
names each file's source, commit and licence), each into a fresh database: messages in against
events out by kind, and what was left out, by reason.

"Messages in" is what the file holds before any choice of memcli's: a ChatGPT conversation's
messages on its kept branch (the tree's other branches are edits not kept), a transcript's
lines that are JSON objects. Events out: chat turns (`message`), `tool_call`, `tool_result`;
left out: the report's `left_out` counts (a transcript line may give several events, a text and
its tool calls, so the columns need not add up to the lines).

    python -m bench.importers_real          # writes bench/results/importers-real.md and .json
    python -m bench.importers_real --check  # the same numbers, printed, no file written
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.perf_data import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "real"
RESULTS = REPO_ROOT / "bench" / "results"
FORMATS = {"chatgpt": "chatgpt", "claude-code": "claude-code", "codex": "codex"}


def messages_in(fmt: str, path: Path) -> int:
    if fmt == "chatgpt":
        data = json.loads(path.read_text(encoding="utf-8"))
        total = 0
        for conv in data if isinstance(data, list) else [data]:
            mapping, node = conv["mapping"], conv.get("current_node")
            while node is not None:
                total += mapping[node].get("message") is not None
                node = mapping[node].get("parent")
        return total
    count = 0
    for line in path.read_bytes().split(b"\n"):
        try:
            count += isinstance(json.loads(line), dict)
        except ValueError:
            pass
    return count


def import_one(fmt: str, path: Path) -> dict[str, Any]:
    """The file imported in a process of its own, into a fresh database: the report and the
    stored events' kinds."""
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "memory.db"
        env = {**os.environ, "MEMCLI_EMBEDDER": "hash", "MEMCLI_NO_DAEMON": "1"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "memcli",
                "--db",
                str(db),
                "import",
                "--from",
                fmt,
                str(path),
                "--defer-embed",
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{path.name}: exit {done.returncode}: {done.stderr.strip()}")
        report = json.loads(done.stdout)
        import apsw

        conn = apsw.Connection(str(db))
        kinds = Counter(kind for (kind,) in conn.execute("SELECT kind FROM events"))
        conn.close()
    return {"report": report, "kinds": dict(kinds)}


def measure() -> list[dict[str, Any]]:
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    rows = []
    for folder, fmt in FORMATS.items():
        for path in sorted((FIXTURES / folder).iterdir()):
            if path.suffix not in (".json", ".jsonl"):
                continue
            got = import_one(fmt, path)
            rows.append(
                {
                    "file": f"{folder}/{path.name}",
                    "format": fmt,
                    "source": _source(readme, path.name),
                    "messages_in": messages_in(fmt, path),
                    "chat": got["kinds"].get("message", 0),
                    "tool_call": got["kinds"].get("tool_call", 0),
                    "tool_result": got["kinds"].get("tool_result", 0),
                    "left_out": got["report"]["left_out"],
                }
            )
    return rows


def _source(readme: str, name: str) -> str:
    """The repository the fixtures' README names on this file's row (or its section's)."""
    for line in readme.splitlines():
        if line.startswith(f"| `{name}`"):
            cell = line.split("|")[2].strip()
            if not cell.startswith("`"):  # a row naming its repository (else: its section's)
                return cell.split("](")[0].lstrip("[").split(" (")[0]
    return "pionxzh/chatgpt-exporter" if name.endswith(".json") else "?"


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# Importers on real files",
        "",
        "Each file of tests/fixtures/real/ (written by the real tools; its README names the "
        "source repository, path, commit and licence of each) imported into a fresh "
        "database. Messages in: a ChatGPT conversation's messages on its kept branch, a "
        "transcript's JSON lines. Events out by kind; left out by the reason the import "
        "report gives (`left_out`). A transcript line may give several events (a text and "
        "its tool calls; a Codex `session_meta` or header line is read for the session's id "
        "and folder).",
        "",
        "| file | source | messages in | chat | tool_call | tool_result | left out |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        left = ", ".join(
            f"{n} {why}" for why, n in sorted(r["left_out"].items(), key=lambda kv: (-kv[1], kv[0]))
        )
        lines.append(
            f"| `{r['file']}` | {r['source']} | {r['messages_in']} | {r['chat']} | "
            f"{r['tool_call']} | {r['tool_result']} | {left or '-'} |"
        )
    total = Counter()
    for r in rows:
        total.update({k: r[k] for k in ("messages_in", "chat", "tool_call", "tool_result")})
    lines += [
        f"| **all {len(rows)} files** | | {total['messages_in']} | {total['chat']} | "
        f"{total['tool_call']} | {total['tool_result']} | "
        f"{sum(sum(r['left_out'].values()) for r in rows)} |",
        "",
        f"Regenerate: `{command}`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print, write no file")
    args = parser.parse_args()
    rows = measure()
    text = markdown(rows, "python -m bench.importers_real")
    if args.check:
        print(text)
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "importers-real.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "importers-real.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
