"""A session's modes, config options and commands, as ACP shows them.

ACP has two ways to show a session's settings: the older `modes`
(`session/set_mode`, `current_mode_update`) and config options
(`session/set_config_option`, `config_option_update`), which clients that
know them use instead. agentd answers both and keeps them in step, as the
spec asks: the `mode` config option is the session's mode, and the `model`
option picks among the configured models (`models = [...]`; ACP has no
stable `session/set_model`). Commands are advertised with
`available_commands_update` after `session/new`, `session/load` and
`session/resume` are answered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentd.acp.updates import SESSION_UPDATE, Outgoing
from agentd.agent.commands import COMMANDS
from agentd.agent.modes import DEFAULT_MODE, MODES

if TYPE_CHECKING:
    from agentd.agent.core import AgentCore
    from agentd.agent.session import Session
    from agentd.config import Settings

MODE_OPTION = "mode"
MODEL_OPTION = "model"


def modes_state(mode: str) -> dict[str, Any]:
    return {
        "currentModeId": mode,
        "availableModes": [
            {"id": m.id, "name": m.name, "description": m.description} for m in MODES.values()
        ],
    }


def config_options(core: AgentCore, session: Session) -> list[dict[str, Any]]:
    return _options(core.settings, session.mode, core.model_of(session))


def _options(settings: Settings, current_mode: str, current_model: str) -> list[dict[str, Any]]:
    mode = {
        "id": MODE_OPTION,
        "name": "Mode",
        "description": "What the agent may do without asking",
        "category": "mode",
        "type": "select",
        "currentValue": current_mode,
        "options": [
            {"value": m.id, "name": m.name, "description": m.description} for m in MODES.values()
        ],
    }
    models = []
    for model_id, takes_images in settings.model_choices():
        entry: dict[str, Any] = {"value": model_id, "name": settings.model_name(model_id)}
        if takes_images:
            entry["description"] = "Takes images"
        models.append(entry)
    model_option = {
        "id": MODEL_OPTION,
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": current_model,
        "options": models,
    }
    return [mode, model_option]


def session_setup(core: AgentCore, session: Session) -> dict[str, Any]:
    """What `session/load` and `session/resume` answer."""
    return _setup(core.settings, session.mode, core.model_of(session))


def new_session_setup(settings: Settings) -> dict[str, Any]:
    """What `session/new` answers besides the id, from the settings alone (it is
    answered before the core exists): a new session starts in the default mode
    on the configured model, as `AgentCore.new_session` makes it."""
    return _setup(settings, DEFAULT_MODE, settings.effective_model())


def _setup(settings: Settings, mode: str, model: str) -> dict[str, Any]:
    return {"modes": modes_state(mode), "configOptions": _options(settings, mode, model)}


def commands_update(session_id: str) -> Outgoing:
    commands = []
    for c in COMMANDS.values():
        command: dict[str, Any] = {"name": c.name, "description": c.description}
        if c.hint is not None:
            command["input"] = {"hint": c.hint}
        commands.append(command)
    return SESSION_UPDATE, {
        "sessionId": session_id,
        "update": {"sessionUpdate": "available_commands_update", "availableCommands": commands},
    }


def options_update(core: AgentCore, session: Session) -> Outgoing:
    return SESSION_UPDATE, {
        "sessionId": session.id,
        "update": {
            "sessionUpdate": "config_option_update",
            "configOptions": config_options(core, session),
        },
    }
