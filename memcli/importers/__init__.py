"""Other tools' histories as events: `memcli import --from FORMAT PATH`.

One module per format, named in FORMATS. A format kept in one JSON file (a list of
conversations or memories) has `item_turns(item, n, notes)`, which reads one parsed item, and
`ITEM`, what an item is called in notes (`KEYS`: the keys of a top-level object whose list
holds the items); a format kept as a folder of files has `read(path, notes)` (and
`DEFAULT_PATH`, where its tool keeps them). Both yield one `Turn` per kept message, tool call or
result, in conversation order, and tell `notes` what the user should hear of and what was
left out, by reason. Everything else (reading the input as a stream within its limits,
checking it before the database opens, event ids, scope, redaction, writing through ingest a
batch at a time) is shared, in `load` and `stream`."""

from __future__ import annotations

FORMATS = {
    "chatgpt": "memcli.importers.chatgpt",  # a ChatGPT data export's conversations.json
    "claude": "memcli.importers.claude",    # a Claude.ai export's conversations.json
    "claude-code": "memcli.importers.claude_code",  # ~/.claude/projects/<project>/*.jsonl
    "codex": "memcli.importers.codex",      # ~/.codex/sessions/**/rollout-*.jsonl
    "mem0": "memcli.importers.mem0",        # mem0's get_all / export JSON
    "basic-memory": "memcli.importers.basic_memory",  # a folder of Markdown notes
}
