"""Everything one daemon owns, wired together; shared by every front end.

`App.create` is the only place that builds the settings, the provider, the
supervisor and the core. Front ends (LSP, ACP) build one `App` after their
`initialize` and close it at shutdown. Importing this module pulls in
pydantic and the turn engine, which is why front ends import it lazily
(after answering `initialize`, in a warm-up thread).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from agentd.agent.core import AgentCore
from agentd.agent.tools import client_tool_specs
from agentd.config import Settings, load_settings
from agentd.providers import make_provider
from agentd.providers.base import ModelProvider, ToolSpec
from agentd.tasks import Supervisor

log = logging.getLogger(__name__)


@dataclass
class App:
    settings: Settings
    supervisor: Supervisor
    provider: ModelProvider
    core: AgentCore
    client_specs: list[ToolSpec] = field(default_factory=list)

    @classmethod
    def create(cls, init_options: dict[str, Any] | None = None) -> App:
        options = dict(init_options or {})
        declared = options.pop("clientTools", None) or []
        settings = load_settings(options)
        for problem in settings.problems:
            log.warning("configuration: %s", problem)
        supervisor = Supervisor()
        provider = make_provider(settings.provider_config())
        core = AgentCore(settings, provider, supervisor)
        specs = client_tool_specs(declared if isinstance(declared, list) else [])
        return cls(settings, supervisor, provider, core, specs)

    async def aclose(self) -> None:
        for session in list(self.core.sessions.values()):
            session.cancel_running()
        await self.supervisor.aclose()
        await self.provider.aclose()
