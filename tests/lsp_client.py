"""The LSP-mode tests' client: the real daemon over stdio, driven by pytest-lsp.

`agentd` is spawned exactly as an editor spawns it (`python -m agentd serve`,
`agentd.testing.daemon_command`), driven by pytest-lsp's client, and pointed
at the bundled model server over loopback. Nothing in between is mocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage
from pytest_lsp import ClientServerConfig, LanguageClient

from agentd.testing.daemon import daemon_command


class AgentdClient:
    """A pytest-lsp client with agentd's notifications collected as plain dicts."""

    def __init__(self, lsp: LanguageClient) -> None:
        self.lsp = lsp
        self.updates: list[dict[str, Any]] = []
        self.memory_changed: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()
        self.tool_handler: Callable[[dict[str, Any]], Any] | None = None
        # The `initialize` result, once `start_client` has initialized the session.
        self.init_result: types.InitializeResult | None = None

    async def _on_update(self, params: dict[str, Any]) -> None:
        self.updates.append(params)
        update = params["update"]
        if (
            update["kind"] == "tool_call"
            and update["executor"] == "client"
            and self.tool_handler is not None
        ):
            result = self.tool_handler(update)
            if asyncio.iscoroutine(result):
                result = await result
            if result is not None:
                self.tool_result(params["sessionId"], update["toolCallId"], *result)
        async with self._changed:
            self._changed.notify_all()

    async def _on_memory_changed(self, params: dict[str, Any]) -> None:
        self.memory_changed.append(params)
        async with self._changed:
            self._changed.notify_all()

    async def wait_for_update(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20.0
    ) -> dict[str, Any]:
        async def wait() -> dict[str, Any]:
            async with self._changed:
                while True:
                    for params in self.updates:
                        if predicate(params):
                            return params
                    await self._changed.wait()

        return await asyncio.wait_for(wait(), timeout)

    async def wait_for_memory_changed(
        self, path: str, count: int = 1, timeout: float = 20.0
    ) -> None:
        async def wait() -> None:
            async with self._changed:
                while sum(path in n["paths"] for n in self.memory_changed) < count:
                    await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)

    async def request(self, method: str, params: Any, msg_id: Any = None) -> Any:
        protocol = self.lsp.protocol
        return await protocol.send_request_async(  # type: ignore[no-untyped-call]
            method, params, msg_id=msg_id
        )

    def notify(self, method: str, params: Any) -> None:
        self.lsp.protocol.notify(method, params)

    def cancel(self, msg_id: Any) -> None:
        """`$/cancelRequest`, sent the way pygls clients send it."""
        self.lsp.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))

    async def new_session(self, root: Path) -> str:
        result = await self.request("agent/newSession", {"workspaceRoot": str(root)})
        return str(result["sessionId"])

    async def prompt(self, session_id: str, text: str, msg_id: Any = None) -> dict[str, Any]:
        return dict(
            await self.request(
                "agent/prompt", {"sessionId": session_id, "prompt": text}, msg_id=msg_id
            )
        )

    def tool_result(self, sid: str, call_id: str, content: str, is_error: bool = False) -> None:
        self.notify(
            "agent/toolResult",
            {"sessionId": sid, "toolCallId": call_id, "content": content, "isError": is_error},
        )

    async def wait_for_log(self, text: str, count: int = 1, timeout: float = 30.0) -> str:
        """The `count`th `window/logMessage` containing `text` (waiting for it to come)."""

        async def wait() -> str:
            while True:
                found = [
                    str(m)
                    for m in (
                        e["message"] if isinstance(e, dict) else e.message
                        for e in self.lsp.log_messages
                    )
                    if text in m
                ]
                if len(found) >= count:
                    return found[count - 1]
                await self.lsp.wait_for_notification("window/logMessage")

        return await asyncio.wait_for(wait(), timeout)

    def kinds(self, session_id: str) -> list[str]:
        return [u["update"]["kind"] for u in self.updates if u["sessionId"] == session_id]

    def text(self, session_id: str) -> str:
        return "".join(
            u["update"]["text"]
            for u in self.updates
            if u["sessionId"] == session_id and u["update"]["kind"] == "message_chunk"
        )


def _keep_dicts(lsp: LanguageClient) -> None:
    # pygls would turn our params into namedtuples; tests read them as the JSON they are.
    def keep(obj: dict[str, Any], cls: type) -> Any:
        return cls(method=obj["method"], jsonrpc=obj["jsonrpc"], params=obj.get("params"))

    def keep_result(obj: dict[str, Any], cls: type) -> Any:
        return cls(id=obj["id"], jsonrpc=obj["jsonrpc"], result=obj.get("result"))

    def keep_request(obj: dict[str, Any], cls: type) -> Any:
        return cls(
            id=obj["id"], method=obj["method"], jsonrpc=obj["jsonrpc"], params=obj.get("params")
        )

    lsp.protocol._converter.register_structure_hook(JsonRPCNotification, keep)
    lsp.protocol._converter.register_structure_hook(JsonRPCRequestMessage, keep_request)
    lsp.protocol._converter.register_structure_hook(JsonRPCResponseMessage, keep_result)


async def start_client(
    env: dict[str, str],
    init_options: dict[str, Any] | None = None,
    process_id: int | None = None,
) -> AgentdClient:
    config = ClientServerConfig(server_command=daemon_command(), server_env=env)
    lsp = await config.start()
    assert isinstance(lsp, LanguageClient)
    _keep_dicts(lsp)
    client = AgentdClient(lsp)

    async def on_update(params: dict[str, Any]) -> None:
        await client._on_update(params)

    async def on_memory_changed(params: dict[str, Any]) -> None:
        await client._on_memory_changed(params)

    lsp.feature("agent/update")(on_update)
    lsp.feature("memory/changed")(on_memory_changed)
    result = await lsp.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            process_id=process_id,
            initialization_options=init_options or {},
        )
    )
    client.init_result = result
    return client
