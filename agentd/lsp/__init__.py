"""The LSP-framed front end: the only package that imports pygls or lsprotocol."""
