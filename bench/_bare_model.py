"""The model side of the bare baselines (`bare_pygls_server.py --model`,
`bare_acp_agent.py`): the HTTP request agentd sends, sent with httpx and
nothing else.

The request is agentd's own: `--body FILE` holds the JSON body of a first
main request agentd sent to the bundled model server (the benchmark records
one before it measures), and each prompt sends it again with the last user
message's text replaced by the prompt's, encoded as agentd encodes it
(compact separators, UTF-8), with the same headers, streaming, read to the
end. The client (and its SSL context) is built at start-up, and the modules
httpx imports on its first request are imported then too, as agentd's
warm-up does: the cold prompt is left with what a prompt must do (connect,
encode, send), so the baseline is not slowed by imports agentd has done.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import httpx

# What httpx imports on its first request (agentd.warmup imports the same).
HTTP_BACKENDS = ("anyio._backends._asyncio", "h11", "httpcore")


class BareModel:
    def __init__(self, base_url: str, body_file: Path) -> None:
        for module in HTTP_BACKENDS:
            importlib.import_module(module)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.template: dict[str, Any] = json.loads(body_file.read_text(encoding="utf-8"))
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(60.0), headers={"User-Agent": "bare/0"}, follow_redirects=False
        )
        self.headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            "X-Agentd-Purpose": "main",
        }

    def body(self, text: str) -> bytes:
        messages = list(self.template["messages"])
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "user":
                messages[i] = {**messages[i], "content": text}
                break
        body = {**self.template, "messages": messages}
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    async def complete(self, text: str) -> str:
        """POST the request, read the event stream to its end; the reply's text."""
        out: list[str] = []
        request = self.client.build_request(
            "POST", self.url, content=self.body(text), headers=self.headers
        )
        response = await self.client.send(request, stream=True)
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[5:]).get("choices") or []:
                    out.append((choice.get("delta") or {}).get("content") or "")
        finally:
            await response.aclose()
        return "".join(out)
