"""Regenerate the shell completion scripts from the Typer app: python completions/generate.py"""

from __future__ import annotations

from pathlib import Path

from typer._completion_shared import get_completion_script

SHELLS = {"bash": "memcli.bash", "zsh": "_memcli", "fish": "memcli.fish"}
HERE = Path(__file__).parent


def render(shell: str) -> str:
    # What `memcli --show-completion` prints, for the shell asked for: the option itself
    # detects the parent process's shell (under `sh` it refuses), so a test run from another
    # shell would fail. The scripts call back into the app at completion time, so they do not
    # change when commands do; the test still checks them against Typer's current template.
    return get_completion_script(prog_name="memcli", complete_var="_MEMCLI_COMPLETE",
                                 shell=shell) + "\n"


if __name__ == "__main__":
    for shell, name in SHELLS.items():
        (HERE / name).write_text(render(shell), encoding="utf-8")
        print(f"wrote completions/{name}")
