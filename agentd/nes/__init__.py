"""Next edit suggestions, apart from any wire: the editor's documents
(`documents`), positions and edits over their text (`text`), and the one
model request that predicts the next edit (`predict`). ACP speaks it
(`agentd.acp.nes`)."""

# What `initialize` advertises, here so that it costs no import: the
# position encodings agentd speaks, and the last entries of the editor's
# edit history and recent files a `nes/suggest` uses.
ENCODINGS = ("utf-16", "utf-32", "utf-8")
MAX_HISTORY = 16
MAX_RECENT_FILES = 3
