"""`memcli correct ID TEXT` (replace a wrong memory with a linked fix) and `memcli entity NAME`
(an entity's profile and the memories that mention it), the SQLite memory extension design's
`correct_fact` and `get_entity_info`. Their options are the fields of their request models
(memcli.operations.curation)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import (
    DbOpt,
    FormatOpt,
    Given,
    JsonOpt,
    id_argument,
    request_options,
)
from memcli.cli.output import emit, errors, read_stdin, resolve_format, warn_redacted
from memcli.core.inputs import check_text
from memcli.operations.curation import CorrectRequest, EntityRequest


@request_options(CorrectRequest)
def correct_cmd(
    memory_id: Annotated[int, id_argument("The memory to correct.")],
    text: Annotated[str, typer.Argument(help="The corrected text; `-` reads stdin.")],
    given: Given,
    db: DbOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replace a wrong fact: a new memory supersedes it (linked, both kept in history)."""
    from memcli.lifecycle.correct import correct_fact

    with errors():
        req = given.request("correct request")
        if text == "-":
            text = check_text(read_stdin(), "the text on stdin")
        with open_memory(db, exists=True) as memory:
            out = correct_fact(memory, memory_id, text, reason=req.reason,
                               owner=memory.owner(req.tenant_id))
        warn_redacted(out)
        emit(out, resolve_format(fmt, as_json),
             lambda p: print(f"corrected {p['supersedes']} -> {p['id']}"))


@request_options(EntityRequest)
def entity_cmd(
    name: Annotated[str, typer.Argument(help="A name, @handle, #tag, email or URL.")],
    given: Given,
    db: DbOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """An entity's profile (type, aliases, first/last seen, mentions) and its memories."""
    from memcli.entities.profile import get_entity_info

    with errors():
        req = given.request("entity request")
        with open_memory(db, with_embedder=False, must_exist=True) as memory:
            out = get_entity_info(memory, name, tenant_id=req.tenant_id, user_id=req.user_id,
                                  limit=req.limit)
        emit(out, resolve_format(fmt, as_json), _entity_text)


def _entity_text(p: dict[str, Any]) -> None:
    kind = p["type"] or "untyped"
    print(f"{p['name']} ({kind}; {p['mentions']} mention(s), {p['first_seen'][:10]} .. "
          f"{p['last_seen'][:10]}; aliases: {', '.join(p['aliases']) or '-'})")
    for m in p["memories"]:
        print(f"  #{m['id']} [{m['kind']}] {m['event_time'][:10]} {' '.join(m['text'].split())}")


def register(app: typer.Typer) -> None:
    app.command("correct")(correct_cmd)
    app.command("entity")(entity_cmd)
