"""How to reach a model endpoint. Pure data: importing this must stay cheap."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

from agentd.errors import ConfigError

if TYPE_CHECKING:
    from agentd.providers.base import Purpose

OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"

# Header names whose values are credentials: hidden from repr, scrubbed from errors.
_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie")


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    kind: Literal["openai", "anthropic"] = "openai"
    # Empty means the provider's public endpoint. OpenAI-style bases include
    # the version (`.../v1`); requests go to {base}/chat/completions. The
    # Anthropic base excludes it; requests go to {base}/v1/messages.
    base_url: str = ""
    api_key: str | None = None
    model: str = ""
    fast_model: str = ""  # side queries (recall, extraction); empty -> model
    connect_timeout: float = 10.0
    read_idle_timeout: float = 60.0  # max gap between bytes of a stream
    total_timeout: float = 300.0  # whole request incl. retries
    max_retries: int = 3
    max_retry_after: float = 30.0  # a longer Retry-After fails fast
    extra_headers: tuple[tuple[str, str], ...] = ()
    # The main model's settings (requests of purpose "main"); None: the
    # family's default (`agentd.providers.models`).
    max_output_tokens: int | None = None
    reasoning_effort: str | None = None
    thinking_budget: int | None = None  # Anthropic extended thinking; None = off
    reasoning_model: bool | None = None  # OpenAI reasoning dialect, by name if None
    replay_reasoning: bool | None = None  # compatible servers' reasoning text sent back
    # Anthropic cache_control breakpoints (OpenAI caches prefixes by itself).
    prompt_caching: bool = True
    # Who set this endpoint when it is not agentd's settings ("the editor":
    # ACP `providers/set`): its errors' hints name them, not AGENTD_*, and
    # every header value is taken for a credential, since the names of a
    # gateway's headers say nothing of what they carry.
    set_by: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("openai", "anthropic"):
            raise ConfigError(f"unknown provider {self.kind!r}: use 'openai' or 'anthropic'")
        for name in ("connect_timeout", "read_idle_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"provider {name} must be a positive number of seconds")
        if self.max_retries < 0 or self.max_retry_after < 0:
            raise ConfigError("provider max_retries and max_retry_after must not be negative")

    def effective_base_url(self) -> str:
        default = ANTHROPIC_BASE_URL if self.kind == "anthropic" else OPENAI_BASE_URL
        return (self.base_url or default).rstrip("/")

    def model_for(self, purpose: Purpose) -> str:
        if purpose == "main":
            return self.model
        return self.fast_model or self.model

    def secrets(self) -> list[str]:
        """Values that must never appear in a message, a log line or a repr."""
        found = [self.api_key] if self.api_key else []
        for name, value in self.extra_headers:
            if self._secret_header(name) and value:
                found.append(value)
                # A credential after its scheme ("Bearer TOKEN"): an error
                # text may quote the token alone.
                token = value.rsplit(None, 1)[-1] if value.strip() else value
                if token != value:
                    found.append(token)
        return found

    def _secret_header(self, name: str) -> bool:
        return bool(self.set_by) or _is_secret_header(name)

    def __repr__(self) -> str:
        # Written by hand so that configs can be logged: no credential is shown.
        shown: list[str] = []
        for f in fields(self):
            value: object = getattr(self, f.name)
            if f.name == "api_key" and value is not None:
                value = "***"
            elif f.name == "extra_headers":
                value = tuple(
                    (k, "***" if self._secret_header(k) else v) for k, v in self.extra_headers
                )
            shown.append(f"{f.name}={value!r}")
        return f"ProviderConfig({', '.join(shown)})"


def _is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_HEADER_WORDS)
