"""LSP work-done progress for long daemon-side work (indexing, extraction).

The core reports `(done, total)` through a plain callback; this turns it into
`window/workDoneProgress/create` + `$/progress` begin/report/end, but only
when the editor declared `window.workDoneProgress` and the work is large
enough to be worth a progress bar.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from lsprotocol import types

if TYPE_CHECKING:
    from agentd.lsp.server import AgentdServer

log = logging.getLogger(__name__)

MIN_TOTAL = 200


class WorkDone:
    def __init__(self, server: AgentdServer, title: str) -> None:
        self._server = server
        self._title = title
        self._token = f"agentd-{uuid.uuid4().hex[:12]}"
        self._created: asyncio.Task[Any] | None = None
        self._ended = False

    def __call__(self, done: int, total: int) -> None:
        if self._ended or total < MIN_TOTAL or not self._server.client_supports_progress():
            return
        proto = self._server.agentd_protocol
        if self._created is None:
            self._created = asyncio.ensure_future(self._begin(total))
            return
        percent = int(100 * done / max(total, 1))
        if self._created.done():
            proto.notify(
                "$/progress",
                {
                    "token": self._token,
                    "value": {
                        "kind": "report",
                        "percentage": percent,
                        "message": f"{done}/{total}",
                    },
                },
            )
        if done >= total:
            self._ended = True
            self._created.add_done_callback(
                lambda _: proto.notify(
                    "$/progress", {"token": self._token, "value": {"kind": "end"}}
                )
            )

    async def _begin(self, total: int) -> None:
        proto = self._server.agentd_protocol
        try:
            await proto.send_request_async(
                types.WINDOW_WORK_DONE_PROGRESS_CREATE,
                types.WorkDoneProgressCreateParams(token=self._token),
            )
        except Exception as exc:
            log.debug("progress not created: %s", exc)
            self._ended = True
            return
        proto.notify(
            "$/progress",
            {
                "token": self._token,
                "value": {
                    "kind": "begin",
                    "title": self._title,
                    "percentage": 0,
                    "cancellable": False,
                },
            },
        )
