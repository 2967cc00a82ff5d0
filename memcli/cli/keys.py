"""`memcli key status` and `memcli key rotate`: the key that encrypts `high` content."""

from __future__ import annotations

import typer

from memcli.cli.common import open_memory
from memcli.cli.options import DbOpt, FormatOpt, JsonOpt
from memcli.cli.output import emit, errors, resolve_format


def _status_text(s: dict) -> None:
    check = ("" if s["all_decrypt"] is None else ", all decrypt" if s["all_decrypt"]
             else f", {s['decrypt_failures']} do not decrypt")
    print(f"key {s['key_id'] or 'none'} from {s['source'] or 'nowhere'}; database key "
          f"{s['database_key_id'] or 'none'}; {s['encrypted_values']} encrypted value(s){check}")


def status_cmd(db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
    """Where the key comes from, its id, how many values are encrypted, whether they all
    decrypt (exit 1 if some do not)."""
    from memcli.store.key_rotation import status

    with errors(), open_memory(db, with_embedder=False) as memory:
        out = status(memory.db)
    emit(out, resolve_format(fmt, as_json), _status_text)
    if out["all_decrypt"] is False:
        raise typer.Exit(1)


def rotate_cmd(db: DbOpt = None, fmt: FormatOpt = None, as_json: JsonOpt = False) -> None:
    """Re-encrypt every `high` value under a new key in one transaction, then replace the
    key file (the old one is kept as key.old-<id> until you delete it)."""
    from memcli.store.key_rotation import rotate

    with errors(), open_memory(db, with_embedder=False) as memory:
        out = rotate(memory.db)
    emit(out, resolve_format(fmt, as_json), lambda r: print(
        f"re-encrypted {r['reencrypted']} value(s): key {r['old_key_id']} -> "
        f"{r['new_key_id']}; old key kept in {r['backup']}"))


def register(app: typer.Typer) -> None:
    key = typer.Typer(name="key", no_args_is_help=True,
                      help="The encryption key of `high` sensitivity content.")
    app.add_typer(key, name="key")
    key.command("status")(status_cmd)
    key.command("rotate")(rotate_cmd)
