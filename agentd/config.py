"""One fully defaulted settings model, and where its values come from.

Precedence, lowest first: defaults < the user's config file
(`<user config dir>/agentd/config.toml`) < environment variables (the pinned
`AGENTD_*` names) < the editor's `initializationOptions`. All three sources
belong to the user; a workspace's own files never feed this model, so a
cloned repository cannot redirect the model endpoint or the API key.

Bad values never stop the daemon: `load_settings` reports them in
`Settings.problems` and keeps the default for that field, and the wire layer
shows the problems to the user once.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from agentd.files import read_config_file
from agentd.layout import user_config_dir
from agentd.messages import clean_text
from agentd.providers.config import ProviderConfig
from agentd.vision import choices, default_model


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class Limits(_Model):
    # Model requests in one prompt (the first request plus each ToolResult step).
    max_steps_per_prompt: int = Field(default=40, ge=0)
    # Prompts in one session.
    max_session_turns: int = Field(default=500, ge=0)
    # Input + output tokens reported by the provider over the whole session; 0 = no limit.
    session_token_limit: int = Field(default=0, ge=0)
    # Tool output longer than this is cut, with a note saying so.
    tool_result_max_chars: int = Field(default=40_000, ge=1_000)
    # An image in a prompt larger than this (decoded) is refused with a clear
    # error. 5 MiB is Anthropic's per-image limit; OpenAI takes 20 MB.
    max_image_bytes: int = Field(default=5 * 1024 * 1024, ge=1024)


class MemorySettings(_Model):
    enabled: bool = True
    # The model tier of recall: a side query to the fast model.
    model_tier: bool = True
    # Safety limit of the recall side query (not a deadline the prompt waits on).
    recall_timeout: float = Field(default=30.0, gt=0)
    # How long a prompt that arrives while its project's memory is being indexed
    # for the first time waits for that index before its first model request
    # (never longer; once the index exists, no prompt waits at all). 0: never.
    first_index_wait: float = Field(default=0.5, ge=0)
    extraction: bool = True
    # How long shutdown waits for a running extraction before cancelling it.
    shutdown_grace: float = Field(default=5.0, ge=0)


class ToolSettings(_Model):
    # Which engine the daemon's `search` and `glob` use: "auto" (ripgrep when
    # its binary runs, else the Python walker), "ripgrep" (required), "python".
    search_engine: Literal["auto", "ripgrep", "python"] = "auto"
    # Wall-clock limit of one search or glob: what was found by then is returned.
    search_timeout: float = Field(default=20.0, gt=0, le=600)


class ModelEntry(_Model):
    """One entry of `models = [...]`: a model a session may switch to (same
    endpoint and key). A plain string in the list is an entry with its id."""

    id: str = Field(min_length=1)
    name: str = ""
    # Whether it takes images; None: decided by its family (`agentd.vision`).
    supports_images: bool | None = None


class CompactionSettings(_Model):
    """Keeping a long session inside the model's context window."""

    enabled: bool = True
    # Compact once the next request would take this share of the input budget
    # (the window less the room kept for the answer).
    threshold: float = Field(default=0.8, ge=0.1, le=0.95)
    # The newest part of the history kept verbatim: this share of the budget
    # (never less than the current prompt and its tool steps).
    keep_recent: float = Field(default=0.3, ge=0.05, le=0.7)
    # Tool results of the newest steps are never cleared (as long as they
    # take at most half the budget).
    keep_tool_results: int = Field(default=3, ge=1)
    # The longest summary the summariser may write.
    summary_max_tokens: int = Field(default=4096, ge=256)


class ThinkingSettings(_Model):
    # Tokens Claude may think for before it answers (the API's minimum is 1,024).
    budget_tokens: int = Field(ge=1024)


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class McpServerSettings(_Model):
    """One `[mcp_servers.NAME]` table (or an editor's `mcpServers` entry).

    A stdio server has `command` (with `args`, `env`, `cwd`); an HTTP server
    has `url` (with `headers`), spoken as streamable HTTP unless `type` is
    `sse`. `env` is all a server's environment holds beyond HOME, LOGNAME,
    PATH, SHELL, TERM and USER: agentd's own variables (its API key among
    them) never reach a server unless they are written here. An `acp`
    server is one an ACP editor runs itself and passes in a session's
    `mcpServers` (`server_id`, reached over the editor's connection); the
    config file cannot name one (`load_settings` drops it, saying why).
    """

    type: Literal["stdio", "http", "sse", "acp"] | None = None
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    # ACP's `serverId` of a server the editor provides (type `acp`).
    server_id: str | None = None
    enabled: bool = True
    # Only these tools of the server are offered (empty: all), minus `exclude_tools`.
    include_tools: list[str] = []
    exclude_tools: list[str] = []
    # Calls to a trusted server (or to its `trusted_tools`) run without asking the editor.
    trust: bool = False
    trusted_tools: list[str] = []
    # Seconds a tool call may take (None: `[mcp] call_timeout`).
    timeout: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _transport(self) -> McpServerSettings:
        _refuse_lone_surrogates(self)
        if self.type == "acp":
            if self.server_id and not self.command and not self.url:
                return self
            raise ValueError("an `acp` server has a serverId, and no command or url")
        if self.server_id is not None:
            raise ValueError("only an `acp` server has a serverId")
        if self.type in (None, "stdio") and self.command and not self.url:
            return self
        if self.type in (None, "http", "sse") and self.url and not self.command:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError("url must be an http:// or https:// URL")
            return self
        raise ValueError("give either `command` (a stdio server) or `url` (an HTTP server)")

    @property
    def transport(self) -> Literal["stdio", "http", "sse", "acp"]:
        if self.type == "acp":
            return "acp"
        if self.command:
            return "stdio"
        return "sse" if self.type == "sse" else "http"


def _refuse_lone_surrogates(server: McpServerSettings) -> None:
    """A lone surrogate (a JSON `\\ud83d` from the editor) in what starts or
    reaches a server cannot be passed on: the command, its arguments and
    environment cannot be encoded for `exec`, a URL or header not for the
    request. Refused here, naming the field, instead of a server that fails
    at every start (its backoff restarting it for ever)."""
    texts: dict[str, list[str]] = {
        "command": [server.command or ""],
        "args": server.args,
        "env": [*server.env, *server.env.values()],
        "cwd": [server.cwd or ""],
        "url": [server.url or ""],
        "headers": [*server.headers, *server.headers.values()],
    }
    for name, values in texts.items():
        if any(clean_text(v) != v for v in values):
            raise ValueError(f"{name}: not valid Unicode (a lone surrogate)")


class McpSettings(_Model):
    # How long the first model request of a prompt waits, counted from a
    # server's start, for a server still starting; its tools join later steps.
    startup_wait: float = Field(default=1.0, ge=0)
    # Seconds a tool call may take before it fails (the server is told to cancel it).
    call_timeout: float = Field(default=120.0, gt=0)
    # Seconds the editor has to answer a permission request; then it is refused.
    permission_timeout: float = Field(default=300.0, gt=0)
    # Seconds a server may take to start and list its tools before it counts as failed.
    startup_timeout: float = Field(default=30.0, gt=0)


class Settings(_Model):
    provider: Literal["openai", "anthropic"] = "openai"
    base_url: str = ""
    api_key: SecretStr | None = None
    model: str = ""
    fast_model: str = ""
    connect_timeout: float = Field(default=10.0, gt=0)
    read_idle_timeout: float = Field(default=60.0, gt=0)
    total_timeout: float = Field(default=300.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    max_retry_after: float = Field(default=30.0, ge=0)
    # Whether the main model takes images; None: decided by its family.
    supports_images: bool | None = None
    # Models a session may pick (ACP config option, `agent/setModel`).
    models: tuple[ModelEntry, ...] = ()
    # The main model (see `agentd.providers.models` for the defaults by family).
    max_output_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: ReasoningEffort | None = None
    thinking: ThinkingSettings | None = None
    reasoning_model: bool | None = None
    replay_reasoning: bool | None = None
    prompt_caching: bool = True
    # Open the connection to the model endpoint once the warm-up has built the
    # client (and when a session starts), so that a first prompt does not wait
    # for TCP and TLS (`App.preconnect`).
    preconnect: bool = True
    limits: Limits = Limits()
    memory: MemorySettings = MemorySettings()
    tools: ToolSettings = ToolSettings()
    mcp: McpSettings = McpSettings()
    # MCP servers by name: the user's config file and the editor's settings,
    # never a workspace's files (a cloned repository must not run commands).
    mcp_servers: dict[str, McpServerSettings] = {}
    # The main model's context window in tokens: one number, or a table
    # {model name: tokens}; 0 (or a model missing from the table) means
    # "ask the endpoint's /models, else the model family's default".
    context_window: int | dict[str, int] = 0
    compaction: CompactionSettings = CompactionSettings()
    log_level: str = "info"
    problems: tuple[str, ...] = ()

    @field_validator("models", mode="before")
    @classmethod
    def _plain_ids(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [{"id": v} if isinstance(v, str) else v for v in value]
        return value

    def effective_model(self) -> str:
        return self.model or default_model(self.provider)

    def model_choices(self) -> list[tuple[str, bool]]:
        """The models a session may pick, the main one first, each with
        whether it takes images."""
        return choices(
            self.effective_model(),
            self.supports_images,
            [(m.id, m.supports_images) for m in self.models],
        )

    def model_name(self, model: str) -> str:
        entry = next((m for m in self.models if m.id == model), None)
        return entry.name if entry is not None and entry.name else model

    def takes_images(self, model: str) -> bool:
        return dict(self.model_choices()).get(model, False)

    def context_window_for(self, model: str) -> int:
        """The configured window of `model` in tokens, 0 when not configured."""
        value = self.context_window
        if isinstance(value, dict):
            return max(0, int(value.get(model, 0)))
        return max(0, value)

    def provider_config(self) -> ProviderConfig:
        model = self.effective_model()
        return ProviderConfig(
            kind=self.provider,
            base_url=self.base_url,
            api_key=self.api_key.get_secret_value() if self.api_key else None,
            model=model,
            fast_model=self.fast_model or model,
            connect_timeout=self.connect_timeout,
            read_idle_timeout=self.read_idle_timeout,
            total_timeout=self.total_timeout,
            max_retries=self.max_retries,
            max_retry_after=self.max_retry_after,
            max_output_tokens=self.max_output_tokens,
            reasoning_effort=self.reasoning_effort,
            thinking_budget=self.thinking.budget_tokens if self.thinking else None,
            reasoning_model=self.reasoning_model,
            replay_reasoning=self.replay_reasoning,
            prompt_caching=self.prompt_caching,
        )


ENV_FIELDS = {
    "AGENTD_PROVIDER": "provider",
    "AGENTD_BASE_URL": "baseUrl",
    "AGENTD_API_KEY": "apiKey",
    "AGENTD_MODEL": "model",
    "AGENTD_FAST_MODEL": "fastModel",
    "AGENTD_CONTEXT_WINDOW": "contextWindow",
    "AGENTD_LOG_LEVEL": "logLevel",
    "AGENTD_MAX_OUTPUT_TOKENS": "maxOutputTokens",
    "AGENTD_REASONING_EFFORT": "reasoningEffort",
    "AGENTD_PRECONNECT": "preconnect",
}


def _read_config_file(path: Path, problems: list[str]) -> dict[str, Any]:
    try:
        return tomllib.loads(read_config_file(path).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        problems.append(f"{path}: {exc}")
        return {}


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# Tables whose keys are names (of variables, headers, models), not settings:
# kept as written.
_VERBATIM = frozenset({"env", "headers", "contextWindow"})


def _normalise_keys(data: dict[str, Any]) -> dict[str, Any]:
    # The config file may use snake_case (TOML habit); the model's aliases are camelCase.
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = to_camel(key)
        if name == "mcpServers" and isinstance(value, dict):
            # Server names are the user's (they name the tools): only their fields change.
            out[name] = {
                server: _normalise_keys(spec) if isinstance(spec, dict) else spec
                for server, spec in value.items()
            }
        elif isinstance(value, dict) and name not in _VERBATIM:
            out[name] = _normalise_keys(value)
        else:
            out[name] = value
    return out


def mcp_servers_from_list(entries: list[Any]) -> dict[str, Any]:
    """ACP's `mcpServers` shape (a list of `{name, command, args, env: [{name, value}]}`
    or `{type, name, url, headers: [{name, value}]}`) -> the config file's (by name).
    Entries that are not objects with a string name are kept under a name that
    says so, so that validation reports them instead of dropping them silently."""
    out: dict[str, Any] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            out[f"#{i}"] = entry
            continue
        spec = {k: v for k, v in entry.items() if k not in ("name", "_meta")}
        for key in ("env", "headers"):
            pairs = spec.get(key)
            if isinstance(pairs, list):
                spec[key] = {
                    p["name"]: p["value"]
                    for p in pairs
                    if isinstance(p, dict)
                    and isinstance(p.get("name"), str)
                    and isinstance(p.get("value"), str)
                }
        out[entry["name"]] = spec
    return out


def _valid_mcp_servers(data: dict[str, Any], problems: list[str]) -> None:
    """Check each MCP server on its own: a bad one is dropped (and reported), the rest kept."""
    servers = data.get("mcpServers")
    if servers is None:
        return
    if isinstance(servers, list):
        servers = mcp_servers_from_list(servers)
    if not isinstance(servers, dict):
        problems.append("setting mcpServers: must be a table of servers by name")
        data.pop("mcpServers")
        return
    kept: dict[str, Any] = {}
    for name, spec in servers.items():
        try:
            server = McpServerSettings.model_validate(spec)
        except ValidationError as exc:
            why = "; ".join(err["msg"] for err in exc.errors())
            problems.append(f"MCP server {name!r} ignored: {why}")
            continue
        if server.transport == "acp":
            # Reached over an ACP editor's connection, which only that editor's
            # session/new (or load, resume, fork) can name.
            problems.append(
                f'MCP server {name!r} ignored: type "acp" is for the servers an ACP '
                "editor passes in a session's mcpServers"
            )
            continue
        kept[name] = spec
    data["mcpServers"] = kept


def load_settings(
    init_options: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    config_file: Path | None = None,
) -> Settings:
    env = dict(os.environ) if env is None else env
    problems: list[str] = []
    file_data = _read_config_file(config_file or user_config_dir() / "config.toml", problems)
    data = _normalise_keys(file_data)
    env_data: dict[str, Any] = {
        alias: env[var] for var, alias in ENV_FIELDS.items() if env.get(var)
    }
    if env.get("AGENTD_MEMORY", "").lower() in ("0", "off", "false", "no"):
        env_data["memory"] = {"enabled": False}
    if env.get("AGENTD_THINKING_BUDGET"):
        env_data["thinking"] = {"budgetTokens": env["AGENTD_THINKING_BUDGET"]}
    data = _deep_merge(data, env_data)
    if init_options:
        data = _deep_merge(data, _normalise_keys(init_options))
    _valid_mcp_servers(data, problems)
    for _ in range(20):
        try:
            return _consistent(Settings.model_validate({**data, "problems": tuple(problems)}))
        except ValidationError as exc:
            # Drop each bad field (keeping its default) and say so; never refuse to start.
            for err in exc.errors():
                loc = [str(p) for p in err["loc"]]
                problems.append(f"setting {'.'.join(loc)}: {err['msg']}")
                if loc:
                    data.pop(loc[0], None)
    return Settings(problems=tuple(problems))


def _consistent(settings: Settings) -> Settings:
    """Checks across fields: what each field's own validation cannot see."""
    thinking, cap = settings.thinking, settings.max_output_tokens
    if thinking is not None and cap is not None and thinking.budget_tokens >= cap:
        # The API would refuse every request: thinking stays off, and the user is told.
        problem = (
            f"setting thinking.budgetTokens: {thinking.budget_tokens} must be below "
            f"maxOutputTokens ({cap}); thinking is off"
        )
        return settings.model_copy(
            update={"thinking": None, "problems": (*settings.problems, problem)}
        )
    return settings
