"""The ACP baseline of `acp_bench.py`: a minimal agent on the ACP Python SDK
(`agent-client-protocol`) that answers `session/new`, and `session/prompt` by
sending agentd's model request (`_bare_model.py`) and streaming the reply's
text back as one `agent_message_chunk`.

    python bench/bare_acp_agent.py --model BASE_URL --body FILE
"""

import asyncio
import itertools
import sys
from pathlib import Path
from typing import Any

from _bare_model import BareModel
from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    text_block,
    update_agent_message,
)


class BareAgent(Agent):
    def __init__(self, model: BareModel) -> None:
        self.model = model
        self.ids = itertools.count(1)
        self.conn: Any = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=f"s{next(self.ids)}")

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        reply = await self.model.complete(text)
        await self.conn.session_update(session_id, update_agent_message(text_block(reply)))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None


async def main() -> None:
    args = sys.argv[1:]
    model = BareModel(args[args.index("--model") + 1], Path(args[args.index("--body") + 1]))
    await run_agent(BareAgent(model))


asyncio.run(main())
