"""What the client can do, known from `initialize` (stdlib only).

`ClientCaps` is read from `initialize.clientCapabilities`; it decides which
client tools the model is offered. What agentd itself can do is advertised
from the handler table (`handlers.HANDLERS`) by the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ClientCaps:
    """What the client said it can do (`initialize.clientCapabilities`)."""

    read_text_file: bool = False
    write_text_file: bool = False
    terminal: bool = False
    # `elicitation.form` / `elicitation.url`: it shows an MCP server's questions.
    elicitation_form: bool = False
    elicitation_url: bool = False

    @classmethod
    def from_json(cls, caps: Any) -> ClientCaps:
        caps = caps if isinstance(caps, dict) else {}
        fs = caps.get("fs") if isinstance(caps.get("fs"), dict) else {}
        elicitation = caps.get("elicitation")
        elicitation = elicitation if isinstance(elicitation, dict) else {}
        return cls(
            read_text_file=fs.get("readTextFile") is True,
            write_text_file=fs.get("writeTextFile") is True,
            terminal=caps.get("terminal") is True,
            # ACP: `{}` says it supports the mode; omitted or null, it does not.
            elicitation_form=isinstance(elicitation.get("form"), dict),
            elicitation_url=isinstance(elicitation.get("url"), dict),
        )

    def tool_names(self) -> list[str]:
        """The client tools offered to the model (each needs what its ACP calls need)."""
        names = []
        if self.read_text_file:
            names.append("read_file")
        if self.read_text_file and self.write_text_file:
            names.append("edit_file")
        if self.write_text_file:
            names.append("write_file")
        if self.terminal:
            names.append("run_command")
        return names
