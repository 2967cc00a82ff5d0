"""Other tools' histories as events: `memcli import --from FORMAT PATH`.

One module per format, named in FORMATS. A format kept in one JSON file has
`turns(data, notes)`, which reads the parsed file; a format kept as a folder of files has
`read(path, notes)` (and `DEFAULT_PATH`, where its tool keeps them). Both yield one `Turn` per
kept message, tool call or result, in conversation order, and add to `notes` what the user
should hear of (printed on stderr). Everything else (event ids, scope, redaction, writing
through ingest) is shared, in `load`."""

from __future__ import annotations

FORMATS = {
    "chatgpt": "memcli.importers.chatgpt",  # a ChatGPT data export's conversations.json
    "claude": "memcli.importers.claude",    # a Claude.ai export's conversations.json
    "claude-code": "memcli.importers.claude_code",  # ~/.claude/projects/<project>/*.jsonl
    "codex": "memcli.importers.codex",      # ~/.codex/sessions/**/rollout-*.jsonl
    "mem0": "memcli.importers.mem0",        # mem0's get_all / export JSON
    "basic-memory": "memcli.importers.basic_memory",  # a folder of Markdown notes
}
