"""The fast path: `memcli query` and `memcli acb build` without importing Typer.

Agents run these two commands before every model call, and Typer's import and command building
cost ~100 ms of every start. The options are not written out a second time here: they are the
Typer commands' own, exported by `python -m memcli.cli.fast --write` into `fast_spec.json`
(a test fails when that file and the Typer declarations drift apart). The parser below accepts
only well-formed command lines (a value for every option, each value of the right type and
range); anything else (`--help`, an unknown or malformed option, a missing argument, shell
completion) returns None and Typer handles the command line, so every message and exit code is
Typer's own. Both routes call the same bodies in `memcli.cli.run`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SPEC_FILE = Path(__file__).with_name("fast_spec.json")
# argv prefix -> its key in fast_spec.json, which is also its body's name in memcli.cli.run
COMMANDS: dict[tuple[str, ...], str] = {("query",): "query", ("acb", "build"): "acb_build"}
_INVALID = object()


def _convert(param: dict[str, Any], raw: str) -> Any:
    """A raw value as the Typer command would receive it, or _INVALID."""
    kind = param["type"]
    try:
        if kind == "text":
            return raw
        if kind == "path":
            return Path(raw)
        if kind == "choice":
            return raw if raw in param["choices"] else _INVALID
        if kind == "integer":
            value: int | float = int(raw)
        elif kind == "float":
            value = float(raw)
        else:
            return _INVALID
    except ValueError:
        return _INVALID
    low, high = param.get("min"), param.get("max")
    if (low is not None and value < low) or (high is not None and value > high):
        return _INVALID
    return value


def parse(spec: dict[str, Any], args: list[str]) -> dict[str, Any] | None:
    """The command's keyword arguments from its command line, or None to leave it to Typer."""
    params = spec["params"]
    values: dict[str, Any] = {p["name"]: p["default"] for p in params}
    options: dict[str, tuple[dict[str, Any], Any]] = {}
    for p in params:
        if p["kind"] == "option":
            for opt in p["opts"]:
                options[opt] = (p, p.get("flag_value"))
            for opt in p["secondary_opts"]:
                options[opt] = (p, False)
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional.extend(args[i:])
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        inline: str | None = None
        name = arg
        if arg.startswith("--"):
            if "=" in arg:
                name, _, inline = arg.partition("=")
        elif len(arg) > 2:  # -k5
            name, inline = arg[:2], arg[2:]
        entry = options.get(name)
        if entry is None:
            return None
        param, flag_value = entry
        if param["flag"]:
            if inline is not None:
                return None
            value: Any = flag_value
        else:
            if inline is None:
                if i >= len(args):
                    return None
                inline = args[i]
                i += 1
            value = _convert(param, inline)
            if value is _INVALID:
                return None
        if param["multiple"]:
            values[param["name"]] = [*(values[param["name"]] or []), value]
        else:
            values[param["name"]] = value
    arguments = [p for p in params if p["kind"] == "argument"]
    if len(positional) > len(arguments):
        return None
    for param, raw in zip(arguments, positional, strict=False):
        value = _convert(param, raw)
        if value is _INVALID:
            return None
        values[param["name"]] = value
    if any(p["required"] for p in arguments[len(positional):]):
        return None
    return values


def route(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(body name, its keyword arguments) when the fast path can run this command line."""
    if any(key.endswith("_COMPLETE") for key in os.environ if key.startswith("_MEMCLI")):
        return None  # shell completion is Typer's
    for prefix, body in COMMANDS.items():
        if tuple(argv[: len(prefix)]) == prefix:
            try:
                spec = json.loads(SPEC_FILE.read_text(encoding="utf-8"))[body]
            except (OSError, ValueError, KeyError):
                return None  # a damaged install still works, through Typer
            kwargs = parse(spec, argv[len(prefix):])
            return None if kwargs is None else (body, kwargs)
    return None


def run(argv: list[str]) -> bool:
    """Run the command line on the fast path if it can; False leaves it to Typer."""
    routed = route(argv)
    if routed is None:
        return False
    from memcli.cli import run as bodies

    body, kwargs = routed
    positional = [kwargs.pop(p) for p in ("text", "request") if p in kwargs]
    getattr(bodies, body)(*positional, **kwargs)
    return True


# -- the spec, exported from the Typer commands ----------------------------------------------


def _jsonable(value: Any) -> Any:
    from enum import Enum

    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def export_spec() -> dict[str, Any]:
    """Each fast command's parameters, read from the Typer app."""
    import typer.main

    from memcli.cli import acb, query
    from memcli.cli.app import build_app

    group = typer.main.get_command(build_app((query, acb)))
    spec: dict[str, Any] = {}
    for prefix, key in COMMANDS.items():
        command: Any = group
        for name in prefix:  # e.g. ("acb", "build"): the build command of the acb group
            command = command.commands[name]
        spec[key] = {"params": [_param_entry(key, p) for p in command.params]}
    return spec


def _param_entry(key: str, p: Any) -> dict[str, Any]:
    """One Typer parameter as the fast parser needs it; a kind it cannot parse exactly as
    Typer would raises, so the exporter (and its test) fail instead of the parser guessing."""
    from enum import Enum

    annotation = p.type_descriptor.annotation
    entry: dict[str, Any] = {
        "name": p.name,
        "kind": p.param_type_name,
        "required": bool(p.required),
        "multiple": bool(p.multiple),
        "default": _jsonable(p.default),
    }
    if p.multiple:
        if annotation != list[str]:
            raise ValueError(f"{key}: only list[str] repeats are supported ({p.name})")
        entry["type"] = "text"
    elif isinstance(annotation, type) and issubclass(annotation, Enum):
        entry["type"] = "choice"
        entry["choices"] = [m.value for m in annotation]
    else:
        names = {str: "text", Path: "path", int: "integer", float: "float", bool: "boolean"}
        if annotation not in names:
            raise ValueError(f"{key}: parameter type {annotation!r} is not supported ({p.name})")
        entry["type"] = names[annotation]
    if p.min is not None or p.max is not None:
        if getattr(p.type_descriptor.parameter_info, "clamp", False):
            raise ValueError(f"{key}: clamped ranges are not supported ({p.name})")
        entry["min"], entry["max"] = p.min, p.max
    if p.param_type_name == "option":
        entry["opts"] = list(p.opts)
        entry["secondary_opts"] = list(p.secondary_opts)
        entry["flag"] = bool(p.is_flag)
        if p.is_flag:
            if annotation is not bool or getattr(p, "count", False):
                raise ValueError(f"{key}: only boolean flags are supported ({p.name})")
            entry["flag_value"] = True
        elif entry["type"] == "boolean":
            raise ValueError(f"{key}: a boolean that is not a flag is not supported ({p.name})")
    elif p.nargs != 1:
        raise ValueError(f"{key}: only single-value arguments are supported ({p.name})")
    if p.envvar or p.callback is not None or p.is_eager:
        raise ValueError(f"{key}: envvar, callback and eager parameters are not supported")
    return entry


def spec_text() -> str:
    return json.dumps(export_spec(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        SPEC_FILE.write_text(spec_text(), encoding="utf-8")
        print(f"wrote {SPEC_FILE}")
    else:
        sys.stdout.write(spec_text())
