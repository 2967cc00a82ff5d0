"""Regenerate the shell completion scripts from the Typer app: python completions/generate.py"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from memcli.cli.app import app

SHELLS = {"bash": "memcli.bash", "zsh": "_memcli", "fish": "memcli.fish"}
HERE = Path(__file__).parent


def render(shell: str) -> str:
    result = CliRunner().invoke(app, ["--show-completion", shell], prog_name="memcli")
    if result.exit_code != 0:
        raise SystemExit(f"cannot render {shell} completion: {result.output}")
    return result.stdout


if __name__ == "__main__":
    for shell, name in SHELLS.items():
        (HERE / name).write_text(render(shell), encoding="utf-8")
        print(f"wrote completions/{name}")
