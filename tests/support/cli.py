"""The real CLI: in-process through `CliRunner` (its click command built once, as a process
builds it) and the installed entry point's code in a child process."""

from __future__ import annotations

import functools
import json
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import typer
import typer.main
import typer.testing

from memcli.cli.options import flag_name

# A config file's retrieval line for tests that need no SPLADE leg (a real model, slow).
NO_SPARSE_CONFIG = (
    "retrieval: {leg_weights: {lexical: 1, sparse: 0, dense: 1, entity: 0.5, trigram: 0.5}}\n")


@functools.cache
def command(app: typer.Typer) -> Any:
    """`app`'s click command, built once. typer.testing.CliRunner builds it again on every
    invoke (~50 ms on a quiet machine, up to ~1 s on a loaded one), which dominates tests of
    hundreds of invocations; a real `memcli` process builds it once."""
    return typer.main.get_command(app)


class CliRunner(typer.testing.CliRunner):
    """Typer's CliRunner (the same isolation of stdin, stdout, stderr and environment, the
    same Result) running `command(app)`, built once per process."""

    def invoke(self, app: typer.Typer, args: str | Sequence[str] | None = None,
               input: bytes | str | None = None, env: Mapping[str, str | None] | None = None,
               catch_exceptions: bool = True, color: bool = False,
               **extra: Any) -> typer.testing.Result:
        cli = command(app)
        if isinstance(args, str):
            args = shlex.split(args)
        prog_name = extra.pop("prog_name", None) or self.get_default_prog_name(cli)
        return_value = exception = exc_info = None
        exit_code = 0
        with self.isolation(input=input, env=env, color=color) as (out, err, mixed):
            try:
                return_value = cli.main(args=args or (), prog_name=prog_name, **extra)
            except SystemExit as e:
                exc_info = sys.exc_info()
                code = 0 if e.code is None else e.code
                if code != 0:
                    exception = e
                if not isinstance(code, int):
                    sys.stdout.write(f"{code}\n")
                    code = 1
                exit_code = code
            except Exception as e:
                if not catch_exceptions:
                    raise
                exception, exit_code, exc_info = e, 1, sys.exc_info()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                stdout, stderr, output = out.getvalue(), err.getvalue(), mixed.getvalue()
        return typer.testing.Result(
            runner=self, stdout_bytes=stdout, stderr_bytes=stderr, output_bytes=output,
            return_value=return_value, exit_code=exit_code, exception=exception,
            exc_info=exc_info)


def use_stub_model(monkeypatch, tmp_path, stub, config: str) -> None:
    """Point the CLI at `stub` as its model, with `config` as its config file."""
    path = tmp_path / "config.yaml"
    path.write_text(config, encoding="utf-8")
    monkeypatch.setenv("MEMCLI_CONFIG", str(path))
    monkeypatch.setenv("MEMCLI_LLM_BASE_URL", stub.base_url)
    monkeypatch.setenv("MEMCLI_LLM_MODEL", "stub-model")


_ENTRY_POINT = "from memcli.cli.entry import main\nmain()\n"


def run_entry_point(args: list[str], env: dict, stdin: str | None = None
                    ) -> subprocess.CompletedProcess:
    """The installed `memcli` entry point's code in a child process (in-process route unless
    a test started a daemon for the database: tests/support/daemon.py)."""
    return subprocess.run([sys.executable, "-c", _ENTRY_POINT, *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=120)


def command_options(app: typer.Typer, *path: str) -> dict[str, Any]:
    """The click options of one command of `app` (its words in `path`), by each of their
    flags."""
    found = typer.main.get_command(app)
    for word in path:
        found = found.commands[word]  # type: ignore[attr-defined]
    return {flag: p for p in found.params for flag in (*p.opts, *p.secondary_opts)}


def check_flags(app: typer.Typer, model: Any, path: Sequence[str], skip: set[str]
                ) -> dict[str, Any]:
    """Each field of `model` but `skip` is a visible flag of the command named for it (kebab
    case) with the field's description as its help; the command's options."""
    options = command_options(app, *path)
    for field, info in model.model_fields.items():
        if field in skip:
            continue
        option = options.get(flag_name(field))
        assert option is not None, f"{' '.join(path)}: no {flag_name(field)}"
        assert option.help == info.description and not option.hidden, field
    return options


def imported(cli: Any, fmt: str, *args: str) -> tuple[Any, str]:
    """`memcli import --from FMT ARGS --json`, which must succeed: its report and its stderr."""
    result = cli("import", "--from", fmt, *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result.stderr
