"""Human-editable views of what memcli believes (principle P6 of the Agent Memory System PRD):
`memcli view export|apply`.

A view is a folder of files a person reads and edits: facts, preferences, active decisions,
open tasks and procedures of one (tenant, user, app), as markdown or yaml, plus the identity and
rules texts bundles start with. `format` holds the item model and the markdown form, `yamlview`
the yaml form, `export` reads the database and writes the folder, `apply` turns a person's
edits into ordinary writes (remember, correct, forget, decision supersede, task update ...).
"""
