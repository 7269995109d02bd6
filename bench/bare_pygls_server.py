"""The baselines of `core_bench.py`: a bare pygls 2 server.

    python bench/bare_pygls_server.py
        does nothing (the start-up baseline);
    python bench/bare_pygls_server.py --model BASE_URL --body FILE
        also answers `agent/newSession` and `agent/prompt` (params as agentd's):
        a prompt sends agentd's model request (`_bare_model.py`) and is answered
        `{"stopReason": "end_turn"}` once the stream has ended (the prompt-path
        baseline).

Speaks LSP over stdio.
"""

import sys
from pathlib import Path
from typing import Any

from pygls.lsp.server import LanguageServer

server = LanguageServer("bare", "0")

if "--model" in sys.argv:
    import itertools

    from _bare_model import BareModel

    args = sys.argv[1:]
    model = BareModel(args[args.index("--model") + 1], Path(args[args.index("--body") + 1]))
    ids = itertools.count(1)

    @server.feature("agent/newSession")
    def new_session(ls: LanguageServer, params: Any) -> dict[str, str]:
        return {"sessionId": f"s{next(ids)}"}

    @server.feature("agent/prompt")
    async def prompt(ls: LanguageServer, params: Any) -> dict[str, str]:
        await model.complete(str(params.prompt))
        return {"stopReason": "end_turn"}


server.start_io()
