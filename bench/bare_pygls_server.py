"""The baseline of `core_bench.py`: a bare pygls 2 server that does nothing.

python bench/bare_pygls_server.py     (speaks LSP over stdio)
"""

from pygls.lsp.server import LanguageServer

LanguageServer("bare", "0").start_io()
