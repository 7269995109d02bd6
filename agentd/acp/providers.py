"""ACP `providers/*`: the editor routes agentd's model requests (stdlib only).

agentd has one provider, `main`: the endpoint every model request of the
daemon goes to (each session's steps, compaction, recall, extraction). It
speaks the two APIs agentd's providers speak, `openai` (Chat Completions,
any compatible server) and `anthropic` (Messages).

- `providers/set` routes it to the editor's endpoint (a gateway, a key the
  editor holds): its base URL, with its headers and none of agentd's
  credentials (agentd's key goes only to the host it was configured for).
  The headers are credentials: they live in the App's memory for this
  connection only (an ACP connection is one daemon over stdio with one
  App, so the App's route is the connection's), and never reach a log, a
  transcript, memory, a status reply or an error message
  (`ProviderConfig.set_by` makes every one a secret to scrub).
- `providers/disable` (and `logout`) routes it back to agentd's own
  configuration. agentd cannot run without a model, so `main` is never
  off: `providers/list` then reports agentd's own endpoint as `current`
  (ACP's `current: null`, "disabled", would be untrue).
- `providers/list` reports the endpoint requests go to now: its API and
  base URL (without credentials or query, whoever set it), never a header.

Every field is checked here (`routed_config`), each failure `InvalidParams`
naming the field without echoing its value: a value may be a secret, or
megabytes long.
"""

from __future__ import annotations

import dataclasses
import string
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from agentd.errors import InvalidParams
from agentd.messages import clean_text

if TYPE_CHECKING:
    from agentd.acp.params import SetProviderParams
    from agentd.app import App
    from agentd.providers.config import ProviderConfig

PROVIDER_ID = "main"
# The APIs agentd's providers speak (`agentd.providers.make_provider`).
KINDS: dict[str, Literal["openai", "anthropic"]] = {"openai": "openai", "anthropic": "anthropic"}
SUPPORTED = tuple(KINDS)
# Who set a routed endpoint, as its errors' hints say it.
SET_BY = "the editor"

MAX_URL = 2048
MAX_HEADERS = 64
MAX_HEADER_NAME = 256
MAX_HEADER_VALUE = 8192
MAX_HEADERS_SIZE = 64 * 1024

# RFC 9110 token characters; a value is visible ASCII, spaces and tabs: no CR
# or LF (a header injected into the request), no NUL, nothing httpx would
# have to encode (it sends header values as ASCII).
_TOKEN = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
# Headers agentd's HTTP client or its request writes: another value would
# break the request's framing, its body or the API version it is written for.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "content-type",
        "accept",
        "x-agentd-purpose",
        "anthropic-version",
    }
)


def check_provider_id(value: str) -> None:
    if value != PROVIDER_ID:
        raise InvalidParams.of("providerId", f"unknown provider: agentd has one, {PROVIDER_ID!r}")


def routed_config(own: ProviderConfig, p: SetProviderParams) -> ProviderConfig:
    """The endpoint `providers/set` asks for: agentd's model settings (model,
    timeouts, output caps), the editor's API, base URL and headers, and no
    key of agentd's."""
    check_provider_id(p.provider_id)
    kind = KINDS.get(p.api_type) if isinstance(p.api_type, str) else None
    if kind is None:
        raise InvalidParams.of("apiType", f"must be one of {', '.join(SUPPORTED)}")
    return dataclasses.replace(
        own,
        kind=kind,
        base_url=base_url(p.base_url),
        api_key=None,
        extra_headers=headers(p.headers),
        set_by=SET_BY,
    )


def base_url(value: str) -> str:
    """An http(s) URL with a host, no credentials, query or fragment (agentd
    appends the API's path to it); -32602 naming `baseUrl` otherwise."""
    why = _url_problem(value)
    if why is not None:
        raise InvalidParams.of("baseUrl", why)
    return value


def _url_problem(value: str) -> str | None:
    if len(value) > MAX_URL:
        return f"longer than {MAX_URL} characters"
    if clean_text(value) != value:
        return "not valid Unicode (a lone surrogate)"
    if any(c.isspace() or not c.isprintable() for c in value):
        return "has whitespace or control characters"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "not a URL"
    if parts.scheme.lower() not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "has no host"
    if "@" in parts.netloc:
        return "has credentials in it: send them as headers"
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        return "has a query or fragment: agentd appends the API's path to the base URL"
    if port == 0:
        return "has port 0"
    import httpx  # loaded with the App, which this request waited for

    try:
        httpx.URL(value)
    except httpx.InvalidURL:
        return "not a URL agentd's HTTP client can use"
    return None


def headers(given: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The editor's headers, checked; an omitted map is an empty one (ACP's words)."""
    if not given:
        return ()
    if len(given) > MAX_HEADERS:
        raise InvalidParams.of("headers", f"more than {MAX_HEADERS} headers")
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    size = 0
    for name, value in given.items():
        if len(name) > MAX_HEADER_NAME:
            raise InvalidParams.of("headers", f"a header name longer than {MAX_HEADER_NAME}")
        if not name or not _TOKEN.issuperset(name):
            raise InvalidParams.of("headers", "a header name that is not an HTTP token")
        field = f"headers.{name}"
        lowered = name.lower()
        if lowered in RESERVED_HEADERS:
            raise InvalidParams.of(field, "written by agentd's HTTP client: not settable")
        if lowered in seen:
            raise InvalidParams.of(field, "given twice (header names are case-insensitive)")
        seen.add(lowered)
        if not isinstance(value, str):
            raise InvalidParams.of(field, "must be a string")
        if len(value) > MAX_HEADER_VALUE:
            raise InvalidParams.of(field, f"longer than {MAX_HEADER_VALUE} characters")
        if not (value.isascii() and value.replace("\t", " ").isprintable()):
            raise InvalidParams.of(
                field, "not printable ASCII (CR, LF and other control characters are refused)"
            )
        size += len(name) + len(value)
        if size > MAX_HEADERS_SIZE:
            raise InvalidParams.of("headers", f"more than {MAX_HEADERS_SIZE} bytes in all")
        out.append((name, value))
    return tuple(out)


def provider_list(app: App) -> dict[str, Any]:
    """`providers/list`: where model requests go now, without a secret."""
    routed = app.routed_to
    config = routed if routed is not None else app.settings.provider_config()
    current = {"apiType": config.kind, "baseUrl": shown_url(config.effective_base_url())}
    return {
        "providers": [
            {
                "providerId": PROVIDER_ID,
                "supported": list(SUPPORTED),
                # `providers/disable` is allowed: it goes back to agentd's own endpoint.
                "required": False,
                "current": current,
                "_meta": {"agentd": {"setBy": "editor" if routed is not None else "settings"}},
            }
        ]
    }


def shown_url(url: str) -> str:
    """`url` without user info or query, which may hold a key (`?key=`)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
