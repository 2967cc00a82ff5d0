"""Typer option types shared by the command groups (kept apart from `output`, which has no
Typer import)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memcli.cli.output import Format, said_old

if TYPE_CHECKING:
    from pydantic import BaseModel


def _root_db(ctx: typer.Context, value: str | None) -> str | None:
    """A command's `--db`, else the one given before the command (`memcli --db x doctor`)."""
    if value is not None:
        return value
    root = ctx.find_root()
    return root.params.get("db") if root is not ctx else None


# A str, not a Path: a Path folds the `//` of a URL (`postgresql://h/db` -> `postgresql:/h/db`).
DbOpt = Annotated[
    str | None,
    typer.Option("--db", help="Database file (default: $MEMCLI_DB, then the user data dir).",
                 show_default=False, callback=_root_db),
]
FormatOpt = Annotated[
    Format | None,
    typer.Option("--format", "-f", help="Output format (default: text on a terminal, else json)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
AsOfOpt = Annotated[
    str | None,
    typer.Option("--as-of", help="Read the memory as it was then: facts valid at that time, "
                                 "events up to it (ISO date or time, e.g. 2026-03-01).",
                 show_default=False),
]


def _id(text: str | int) -> int:
    """The parser of every id argument: an id beyond 64 bits is a usage error (exit 2)."""
    from memcli.core.ids import parse_id

    try:
        return parse_id(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def id_argument(help: str) -> Any:
    """A required id argument (`memcli forget ID`), parsed by the one id rule."""
    return typer.Argument(help=help, parser=_id, metavar="ID", show_default=False)


def id_option(*decls: str, help: str) -> Any:
    """An optional id option (`purge --memory-id ID`), parsed by the one id rule."""
    return typer.Option(*decls, help=help, parser=_id, metavar="ID", show_default=False)


MemoryIdArg = Annotated[int, id_argument("A memory id.")]


def _count(text: str | int) -> int:
    """The parser of `--limit`: at least 1, and small enough for SQL's LIMIT (64 bits)."""
    from memcli.core.ids import MAX_ID

    try:
        number = int(str(text).strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a whole number") from None
    if not 1 <= number <= MAX_ID:
        raise typer.BadParameter(f"{text} is out of range (1 to {MAX_ID})")
    return number


def limit_option(help: str | None = None) -> Any:
    """`--limit N`: how many rows at most."""
    return typer.Option("--limit", help=help, parser=_count, metavar="N")


# -- old spellings ---------------------------------------------------------------------------
# Flag spellings from before the flags were named for their fields are kept working until
# OLD_SPELLINGS_UNTIL (hidden from --help, listed in docs/reference/cli.md): a script that says
# `--user alice` goes on working, and is told on stderr what to say instead (`said_old`).
# The parameter of an old spelling is its option's parameter with this suffix (the docs
# generator and the tests find them by it).
OLD = "__legacy"


def old_spellings(aliases: dict[str, str]) -> Any:
    """A decorator for a command whose own options had other spellings (`mcp`, `hook`):
    `aliases` maps a parameter to its old flag, accepted as a hidden option that gives the
    parameter its value, with the notice. Given, it wins over the parameter's environment
    variable, as the old flag did."""
    import inspect

    def decorate(func: Any) -> Any:
        signature = inspect.signature(func, eval_str=True)
        new = {name: _first_flag(signature.parameters[name].annotation) for name in aliases}
        hidden = [inspect.Parameter(
            name + OLD, inspect.Parameter.KEYWORD_ONLY, default=None,
            annotation=Annotated[_value_type(signature.parameters[name].annotation) | None,
                                 typer.Option(old, hidden=True, show_default=False)])
            for name, old in aliases.items()]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            for name, old in aliases.items():
                value = kwargs.pop(name + OLD)
                if value is not None:
                    said_old(old, new[name])
                    kwargs[name] = value
            return func(**kwargs)

        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*signature.parameters.values(), *hidden])
        return command

    return decorate


def _value_type(annotation: Any) -> Any:
    """`int` of `Annotated[int, typer.Option(...)]`, `str` of `Annotated[str | None, ...]`."""
    import typing

    kind = typing.get_args(annotation)[0]
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if args else kind


def _first_flag(annotation: Any) -> str:
    """`--user-id` of `Annotated[str | None, typer.Option("--user-id", ...)]`."""
    import typing

    option = typing.get_args(annotation)[1]
    return str(option.param_decls[0] if option.param_decls else option.default)


# -- options built from a request model ------------------------------------------------------
# The old spellings of request fields, on every command whose model has the field.
LEGACY_FLAGS = {
    "tenant_id": "--tenant", "user_id": "--user", "session_id": "--session", "app_id": "--app",
    "run_id": "--run", "actor_id": "--actor", "categories": "--category", "kinds": "--kind",
    "channels": "--channel", "return_format": "--return",
}


def flag_name(field: str) -> str:
    """The one rule: a request field's flag is its name in kebab case."""
    return "--" + field.replace("_", "-")


def _cli_type(annotation: Any, name: str) -> Any:
    """The type Typer parses a field's value as (None always allowed: not given)."""
    import types
    import typing
    from enum import StrEnum

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _cli_type(args[0], name) if len(args) == 1 else str
    if typing.get_origin(annotation) is typing.Annotated:
        return _cli_type(args[0], name)
    if typing.get_origin(annotation) is typing.Literal:
        return StrEnum(name.title().replace("_", ""), {str(v): str(v) for v in args})
    if typing.get_origin(annotation) is list:
        return list[_cli_type(args[0], name)]  # type: ignore[misc]
    return annotation


def _bounds(info: Any) -> dict[str, Any]:
    """Typer's min/max from the field's ge/le, so `--top-k 0` fails as a usage error; an id
    (memcli.core.ids.Id, up to 64 bits) is read by the one id rule."""
    import typing

    from memcli.core.ids import MAX_ID

    rules = list(info.metadata)
    for arg in typing.get_args(info.annotation):  # `Id | None`: Id's own rules
        rules += [r for m in getattr(arg, "__metadata__", ()) for r in getattr(m, "metadata", [m])]
    out: dict[str, Any] = {}
    for rule in rules:
        if getattr(rule, "ge", None) is not None:
            out["min"] = rule.ge
        if getattr(rule, "le", None) is not None:
            out["max"] = rule.le
    if out.get("max") == MAX_ID:
        return {"parser": _id, "metavar": "ID"}
    return out


def request_options(model: type[BaseModel], *, skip: tuple[str, ...] = (),
                    legacy: dict[str, str] | None = None, short: dict[str, str] | None = None,
                    off: dict[str, str] | None = None, help: dict[str, str] | None = None) -> Any:
    """A decorator in the style of sqlite-utils' shared options: the command gets one option
    per field of the request model (but `skip`), named by `flag_name`, typed
    and helped by the field, and receives the values given on the command line as `given`
    (field name -> value; a field left out is absent, so a JSON request's value or the model's
    default holds). The options go where the command lists `given`. `legacy`: old spellings
    kept as hidden aliases (LEGACY_FLAGS plus these); `short`: a visible short flag; `off`: a
    boolean's negative flag; `help`: a command's own wording of a field's help."""
    spec = {"skip": skip, "aliases": {**LEGACY_FLAGS, **(legacy or {})}, "short": short or {},
            "off": off or {}, "help": help or {}}

    def decorate(func: Any) -> ModelCommand:
        return ModelCommand(func, model, spec)

    return decorate


class ModelCommand:
    """A Typer command whose options come from a request model. The signature is built only
    when Typer reads it, which it does for the command being run: the other commands' options
    are not built at start."""

    def __init__(self, func: Any, model: type[BaseModel], spec: dict[str, Any]) -> None:
        self.func, self.model, self.spec = func, model, spec
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(self, name, getattr(func, name))

    @functools.cached_property
    def _built(self) -> tuple[Any, dict[str, list[str]], set[str]]:
        import inspect

        model = self.model
        listed = list(inspect.signature(self.func, eval_str=True).parameters.values())
        at = [p.name for p in listed].index("given")  # the model's options go where it is
        own = listed[:at] + listed[at + 1:]
        params: list[inspect.Parameter] = []
        names: dict[str, list[str]] = {}
        switches: set[str] = set()
        for field, info in model.model_fields.items():
            if field in self.spec["skip"] or field in {p.name for p in own}:
                continue
            kind = _cli_type(info.annotation, field)
            switch = kind is bool and info.default is False  # `--strict`, no `--no-strict`
            if switch:
                switches.add(field)
            params.append(self._param(field, kind, info, self._decls(field, kind, switch),
                                      self.spec["help"].get(field, info.description), switch))
            names[field] = [field]
            old = self.spec["aliases"].get(field)
            if old and old not in (flag_name(field), self.spec["short"].get(field)):
                params.append(self._param(field + OLD, kind, info, [old], None,
                                          switch, hidden=True))
                names[field].append(field + OLD)
        after = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[at:]]
        return inspect.Signature([*own[:at], *params, *after]), names, switches

    def _decls(self, field: str, kind: Any, switch: bool) -> list[str]:
        flag = flag_name(field)
        if kind is bool and not switch:
            flag = f"{flag}/{self.spec['off'].get(field, '--no-' + flag[2:])}"
        short = self.spec["short"].get(field)
        return [flag, *([short] if short else [])]

    @staticmethod
    def _param(name: str, kind: Any, info: Any, decls: list[str], text: str | None,
               switch: bool, hidden: bool = False) -> Any:
        """One option; a `switch` (a boolean off by default) is a lone flag, False when not
        given, any other field None when not given."""
        import inspect

        option = typer.Option(*decls, help=text, show_default=False, hidden=hidden,
                              **_bounds(info))
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=False if switch else None,
            annotation=Annotated[bool if switch else kind | None, option])

    @property
    def __signature__(self) -> Any:
        return self._built[0]

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {p.name: p.annotation for p in self._built[0].parameters.values()}

    def __call__(self, **kwargs: Any) -> Any:
        given: dict[str, Any] = {}
        _, names, switches = self._built
        for field, spellings in names.items():
            # Not given: None, a switch's False, an empty list (never a 0, 0.0 or the False of
            # a `--pinned/--unpinned` pair given).
            values = [v if v is not None and v != [] and not (field in switches and v is False)
                      else None for v in (kwargs.pop(s) for s in spellings)]
            if values[1:] and values[1] is not None:
                said_old(self.spec["aliases"][field], flag_name(field))
            value = next((v for v in values if v is not None), None)
            if value is not None:
                given[field] = _plain(value)
        return self.func(given=Given(given, self.model), **kwargs)


class Given(dict[str, Any]):
    """The values a command was given on its command line (field name -> value), and the
    request model whose fields its options are: `request` validates them as
    that model, so a command names its model once, in `request_options`."""

    def __init__(self, values: dict[str, Any], model: type[BaseModel]) -> None:
        super().__init__(values)
        self.model = model

    def request(self, what: str, **arguments: Any) -> Any:
        """The command's request: its flags and `arguments` (its positional arguments, or
        what it read from stdin) checked and validated as the model; a problem is one usage
        error line naming `what`."""
        from memcli.operations.requests import validated

        values = {**self, **arguments}
        check_flags(values)
        return validated(self.model, values, what)


def _plain(value: Any) -> Any:
    """A parsed value as JSON would give it: a choice's string, not Typer's enum member."""
    from enum import Enum

    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def check_flags(values: dict[str, Any]) -> None:
    """Every text flag must be valid UTF-8: argv bytes that are not arrive as lone surrogates,
    which SQLite and the tokenizers cannot take (a usage error naming the flag)."""
    from memcli.core.inputs import check_text

    for name, value in values.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_text(item, flag_name(name))
