"""Chat exports of other tools as events: `memcli import --from FORMAT PATH`.

One module per format, named in FORMATS; each has `turns(data)`, which reads the parsed
file and yields one `Turn` per kept message, in conversation order. Everything else (reading
the file, event ids, scope, redaction and writing through ingest) is shared, in `load`."""

from __future__ import annotations

FORMATS = {
    "chatgpt": "memcli.importers.chatgpt",  # a ChatGPT data export's conversations.json
    "claude": "memcli.importers.claude",    # a Claude.ai export's conversations.json
}
