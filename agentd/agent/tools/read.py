"""`read_file`: a regular text file of the workspace, numbered lines, bounded."""

from __future__ import annotations

import os
from typing import Any

from agentd.agent.tools import specs
from agentd.agent.tools.fs import Root
from agentd.agent.tools.output import ToolConfig, ToolOutput
from agentd.agent.tools.worker import StopToken
from agentd.errors import ToolError
from agentd.events import Location
from agentd.files import read_fd


def run(root: Root, args: dict[str, Any], config: ToolConfig, token: StopToken) -> ToolOutput:
    path: str = args["path"]
    parts = root.parts(path)
    fd, _ = root.open_file(parts, path)
    try:
        data = read_fd(fd, specs.READ_LIMIT_BYTES + 1)
    finally:
        os.close(fd)
    if b"\x00" in data[:8192]:
        raise ToolError(f"{path} looks like a binary file")
    truncated = len(data) > specs.READ_LIMIT_BYTES
    lines = data[: specs.READ_LIMIT_BYTES].decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    offset = args.get("offset")
    limit = args.get("limit")
    start = max(1, int(offset or 1))
    end = len(lines) if limit is None else min(len(lines), start - 1 + max(0, int(limit)))
    width = len(str(end)) if end else 1
    body = "\n".join(f"{i:>{width}}  {lines[i - 1].rstrip(chr(13))}" for i in range(start, end + 1))
    if truncated:
        body += f"\n[file truncated at {specs.READ_LIMIT_BYTES} bytes]"
    if not body:
        body = "(empty file)" if not lines else f"(the file has {len(lines)} lines)"
    full = str(root.path.joinpath(*parts))
    return ToolOutput(body, [Location(full, start)])
