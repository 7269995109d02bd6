"""Where agentd keeps its files.

    $AGENTD_HOME/projects/<slug>/memory/     a project's memory (MEMORY.md + topic files)
    $AGENTD_HOME/projects/<slug>/sessions/   its session transcripts (`agentd.transcript`)
    $AGENTD_HOME/cache/memory-index/<hash>.jsonl   a memory folder's parsed notes, kept
                                             across starts (`agentd.memory.index_cache`)
    $AGENTD_HOME/cache/memory-index/<hash>.index   a project's whole memory index, as its
                                             last build made it (`agentd.memory.index_snapshot`)
    <workspace>/.agentd/memory/              optional team memory, shared through git
    <user config dir>/                       config.toml, AGENTS.md, the TCP token

The slug keeps the last components of the workspace path for a human reading
the folder listing, and a hash of the resolved absolute path so that two
different roots never collide. Nothing here creates directories. Below the
memory, the transcripts and the settings, which all need these places.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from pathlib import Path

import platformdirs

APP_NAME = "agentd"
INDEX_FILE = "MEMORY.md"
# The folder of every project's folder, in `$AGENTD_HOME`.
PROJECTS_FOLDER = "projects"
# A project's memory folder, beside its `sessions` folder.
MEMORY_FOLDER = "memory"
TEAM_MEMORY_PARTS = (".agentd", "memory")
TOPIC_SUFFIX = ".md"
# Derived data agentd can always rebuild, outside any memory folder (a team
# folder is shared through git; the cache is not memory).
MEMORY_INDEX_CACHE_PARTS = ("cache", "memory-index")

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_READABLE_MAX = 40
_HASH_CHARS = 12


def agentd_home() -> Path:
    """``$AGENTD_HOME`` if set, else the platform's per-user data directory."""
    env = os.environ.get("AGENTD_HOME", "").strip()
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def user_config_dir() -> Path:
    """The per-user config directory (``config.toml``, the user-level ``AGENTS.md``);
    ``$AGENTD_CONFIG_DIR`` overrides it."""
    override = os.environ.get("AGENTD_CONFIG_DIR")
    if override:
        return Path(override)
    return Path(platformdirs.user_config_dir(APP_NAME))


def agentd_folders() -> list[tuple[Path, str]]:
    """agentd's own folders as real paths, each with what it is called: no
    additional root may lie inside one, and no editor write may go there."""
    folders = [(agentd_home(), "data folder, $AGENTD_HOME"), (user_config_dir(), "config folder")]
    return [(Path(os.path.realpath(f)), name) for f, name in folders]


def canonical_root(workspace_root: Path) -> Path:
    """The absolute, symlink-resolved form used as the identity of a project."""
    return Path(os.path.normcase(Path(workspace_root).expanduser().resolve(strict=False)))


def _readable_part(root: Path) -> str:
    parts = [p for p in root.parts[-2:] if p not in (root.anchor, "/", "\\")]
    words = []
    for part in parts:
        # NFKD then ASCII keeps "café" readable as "cafe"; other scripts fall away.
        ascii_part = unicodedata.normalize("NFKD", part).encode("ascii", "ignore").decode()
        word = _UNSAFE.sub("-", ascii_part).strip("-.")
        if word:
            words.append(word)
    readable = "-".join(words)[:_READABLE_MAX].strip("-.")
    return readable or "root"


def project_slug(workspace_root: Path) -> str:
    """A readable, collision-free folder name for a workspace root."""
    root = canonical_root(workspace_root)
    digest = hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()
    return f"{_readable_part(root)}-{digest[:_HASH_CHARS]}"


def project_dir(workspace_root: Path, home: Path | None = None) -> Path:
    base = home if home is not None else agentd_home()
    return base / PROJECTS_FOLDER / project_slug(workspace_root)


def memory_dir(workspace_root: Path, home: Path | None = None) -> Path:
    """The project's memory folder (not created here)."""
    return project_dir(workspace_root, home) / MEMORY_FOLDER


def team_memory_dir(workspace_root: Path) -> Path:
    """The optional team memory folder inside the workspace (shared through git)."""
    return canonical_root(workspace_root).joinpath(*TEAM_MEMORY_PARTS)


def memory_index_cache_dir(home: Path | None = None) -> Path:
    """Where the index caches of every memory folder live (not created here)."""
    base = home if home is not None else agentd_home()
    return base.joinpath(*MEMORY_INDEX_CACHE_PARTS)


def memory_index_cache_file(folder_real: Path, home: Path | None = None) -> Path:
    """The index cache of the memory folder whose real path is ``folder_real``:
    one file per folder, named by a hash of that path (a team folder reached
    through two workspaces shares one)."""
    key = str(folder_real).encode("utf-8", "surrogateescape")
    return memory_index_cache_dir(home) / f"{hashlib.sha256(key).hexdigest()[:32]}.jsonl"


def memory_index_snapshot_file(
    folder_real: Path, team_real: Path, home: Path | None = None
) -> Path:
    """The saved index of the project whose memory folder and team folder have
    these real paths (one index covers both): named by a hash of the pair."""
    key = f"{folder_real}\0{team_real}".encode("utf-8", "surrogateescape")
    return memory_index_cache_dir(home) / f"{hashlib.sha256(key).hexdigest()[:32]}.index"
