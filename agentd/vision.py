"""Which models take images, decided once for the settings and the handshake.

A model takes images when the settings say so (`supportsImages` at the top
level for the main model, or on its entry in `models = [...]`), else when its
name belongs to a family known to (`gpt-4o`, `claude-3`, `gemini`, `-vl`
models, ...). `choices` is the one rule for which models a session may pick
and whether each takes images; `Settings` applies it to validated settings.

`peek_images` answers "can any configured model take images?" for the
`initialize` replies (ACP `promptCapabilities.image`, LSP `promptContent`),
which are sent before the settings model (pydantic) is imported: it reads
the same sources with the stdlib only, a few keys of them, and
`tests/unit/test_vision.py` keeps it equal to what `Settings` says.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Families whose models accept images, by name. Matching is on the name only
# (an endpoint serving "gpt-4o" under another name needs `supportsImages`).
_VISION_FAMILIES = re.compile(
    r"""(
        gpt-4o | gpt-4\.1 | gpt-4\.5 | gpt-4-turbo | gpt-5 | chatgpt-4o
      | (^|/)o[13](-pro)?($|-20) | (^|/)o4-mini
      | claude-3 | claude-(sonnet|opus|haiku)-4
      | gemini | gemma-?3 | llava | pixtral | moondream | minicpm-v | internvl | qvq
      | llama-?4 | vision | mistral-(small|medium)-3
      | (^|[-_/.:])vl($|[-_.:]) | qwen[0-9.]*-?vl
    )""",
    re.X | re.I,
)
_OPENAI_DEFAULT = "gpt-4o-mini"
_ANTHROPIC_DEFAULT = "claude-sonnet-4-5"


def family_takes_images(model: str) -> bool:
    return bool(_VISION_FAMILIES.search(model))


def default_model(provider: str) -> str:
    return _ANTHROPIC_DEFAULT if provider == "anthropic" else _OPENAI_DEFAULT


def choices(
    main: str, main_images: bool | None, entries: Sequence[tuple[str, bool | None]]
) -> list[tuple[str, bool]]:
    """The models a session may pick, the main one first, each with whether it
    takes images. `entries` are `models = [...]` as (id, supportsImages)."""
    out: list[tuple[str, bool]] = []
    seen: set[str] = set()
    explicit = dict(entries)
    for model, flag in [(main, main_images), *entries]:
        if not model or model in seen:
            continue
        seen.add(model)
        if flag is None and model == main:
            flag = explicit.get(model)  # the main model's own entry may say
        out.append((model, family_takes_images(model) if flag is None else flag))
    return out


# --- the handshake's peek (stdlib only) ---------------------------------------------


def peek_images(
    options: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> bool:
    """Whether any model the settings will offer takes images, before the
    settings are loaded. The sources and their precedence are `load_settings`'s:
    config file < environment < the editor's options."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    path = config_file or _config_file(env)
    if path.is_file():
        merged.update(_read_toml(path))
    for var, key in (("AGENTD_PROVIDER", "provider"), ("AGENTD_MODEL", "model")):
        if env.get(var):
            merged[key] = env[var]
    for key, value in (options or {}).items():
        merged[_camel(key)] = value
    provider = "anthropic" if merged.get("provider") == "anthropic" else "openai"
    model = merged.get("model")
    main = model if isinstance(model, str) and model else default_model(provider)
    flag = merged.get("supportsImages")
    return any(
        takes
        for _, takes in choices(
            main, flag if isinstance(flag, bool) else None, _entries(merged.get("models"))
        )
    )


def _entries(raw: Any) -> list[tuple[str, bool | None]]:
    out: list[tuple[str, bool | None]] = []
    if not isinstance(raw, list):
        return out
    for item in raw:
        if isinstance(item, str):
            out.append((item, None))
        elif isinstance(item, dict) and isinstance(item.get("id"), str):
            flag = item.get("supportsImages", item.get("supports_images"))
            out.append((item["id"], flag if isinstance(flag, bool) else None))
    return out


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _config_file(env: Mapping[str, str]) -> Path:
    """`layout.user_config_dir() / "config.toml"`, without importing
    platformdirs on Linux (its import costs more than the whole peek)."""
    override = env.get("AGENTD_CONFIG_DIR")
    if override:
        return Path(override) / "config.toml"
    if sys.platform.startswith("linux"):
        base = env.get("XDG_CONFIG_HOME", "").strip() or os.path.expanduser("~/.config")
        return Path(base) / "agentd" / "config.toml"
    from agentd.layout import user_config_dir

    return user_config_dir() / "config.toml"


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib  # only when there is a file: its import is most of the cost

    from agentd.files import read_config_file

    try:
        data = tomllib.loads(read_config_file(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}  # load_settings reports it
    return {_camel(k): v for k, v in data.items()}
