"""The tool specs the model sees: names, descriptions written for models, schemas.

Daemon tools (`read_file`, `list_dir`, `search`, `glob`: pinned names) run in
the daemon, read-only and confined to the workspace. Client tools are run by
the editor and offered only when it declared them in `initialize`.
"""

from __future__ import annotations

from typing import Any

from agentd.messages import ToolSpec

# Limits, shared by the tools and their descriptions.
READ_LIMIT_BYTES = 512 * 1024
SEARCH_MAX_FILE_BYTES = 4 * 1024 * 1024
SEARCH_DEFAULT_RESULTS = 100
SEARCH_MAX_RESULTS = 500
SEARCH_MAX_CONTEXT = 10
SEARCH_LINE_CHARS = 300
OUTPUT_MAX_CHARS = 30_000
GLOB_DEFAULT_RESULTS = 100
GLOB_MAX_RESULTS = 1000
LIST_MAX_DEPTH = 6
LIST_PER_DIR = 100
LIST_MAX_ENTRIES = 500

# Absolute paths reach the session's additional workspace roots (listed in
# the system prompt); without a path, search and glob look in the workspace
# root only.
_PATH = {
    "type": "string",
    "description": "Path relative to the workspace root, or absolute inside one of the "
    "workspace roots.",
}
_FOLDER = {
    "type": "string",
    "description": "Folder (or, for search, a file) relative to the workspace root, or "
    "absolute inside one of the workspace roots; default '.' (the workspace root only).",
}
_HIDDEN = {
    "type": "boolean",
    "description": "Also look at hidden entries (names starting with '.'). Default false.",
}
_NO_IGNORE = {
    "type": "boolean",
    "description": "Also look at what .gitignore, .ignore and .git/info/exclude exclude "
    "(build output, dependencies). Default false.",
}
_TYPE = {
    "type": "string",
    "description": "Only files of this type: py, js, ts, rust, go, java, c, cpp, md, json, "
    "yaml, toml, sh, html, css, sql, ... (ripgrep's names).",
}

READ_FILE = ToolSpec(
    "read_file",
    "Read a text file of the workspace. Returns its lines numbered from 1 "
    f"('N  text'). Reads at most {READ_LIMIT_BYTES // 1024} KiB; use offset and limit "
    "for a part of a long file (search first to find the lines). Binary files, "
    "devices and FIFOs are refused.",
    {
        "type": "object",
        "properties": {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "limit": {"type": "integer", "minimum": 0, "description": "Number of lines."},
        },
        "required": ["path"],
    },
    read_only=True,
)

LIST_DIR = ToolSpec(
    "list_dir",
    "List a folder of the workspace as a tree: folders end with '/', files show "
    "their size. depth 1 (default) lists the folder itself; up to "
    f"{LIST_MAX_DEPTH} shows subfolders too. Shows at most {LIST_PER_DIR} entries per "
    f"folder and {LIST_MAX_ENTRIES} in all, and says what it left out. Hidden entries "
    "are listed; what .gitignore excludes is not (unless no_ignore). To find files by "
    "name use glob; to find code use search.",
    {
        "type": "object",
        "properties": {
            "path": _FOLDER,
            "depth": {
                "type": "integer",
                "minimum": 1,
                "maximum": LIST_MAX_DEPTH,
                "description": "How many levels to show (1 = this folder only).",
            },
            "no_ignore": _NO_IGNORE,
        },
        "required": [],
    },
    read_only=True,
)

SEARCH = ToolSpec(
    "search",
    "Search the contents of the workspace's files (ripgrep). The query is literal "
    "text unless regex is true (then RE2/Rust regex syntax: no look-around or "
    "backreferences; matching is per line). Case: 'smart' (default) ignores case "
    "unless the query has an uppercase letter. Results are grouped by file, "
    "sorted by path, as 'N:line' for matches and 'N-line' for context lines; "
    f"long lines are cut around the match. Returns at most max_results matching lines "
    f"(default {SEARCH_DEFAULT_RESULTS}) and says how many more there are. Files that "
    ".gitignore excludes, hidden files, binary files and files over "
    f"{SEARCH_MAX_FILE_BYTES // (1024 * 1024)} MiB are skipped. Narrow with path, glob or "
    "type; use files_only to see which files match first. Prefer this over reading "
    "files one by one to find where something is.",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Text (or regex) to find, one line."},
            "path": _FOLDER,
            "regex": {"type": "boolean", "description": "Treat query as a regex."},
            "case": {
                "type": "string",
                "enum": ["smart", "sensitive", "insensitive"],
                "description": "Case matching; default 'smart'.",
            },
            "glob": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only files matching these globs ('*.py', 'src/**/*.ts', "
                "'!*_test.go' to exclude), relative to path.",
            },
            "type": _TYPE,
            "context": {
                "type": "integer",
                "minimum": 0,
                "maximum": SEARCH_MAX_CONTEXT,
                "description": "Lines of context before and after each match. Default 0.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": SEARCH_MAX_RESULTS,
                "description": f"Matching lines to show (default {SEARCH_DEFAULT_RESULTS}).",
            },
            "files_only": {
                "type": "boolean",
                "description": "List the matching files with their match counts instead of "
                "the lines.",
            },
            "hidden": _HIDDEN,
            "no_ignore": _NO_IGNORE,
        },
        "required": ["query"],
    },
    read_only=True,
)

GLOB = ToolSpec(
    "glob",
    "Find files by path pattern: '**/*.py', 'src/**/test_*.ts', '*.{js,ts}'. A "
    "pattern without '/' matches file names at any depth ('*.md' = '**/*.md'); "
    "with '/', it is matched from path ('src/*.ts' = files directly in src). "
    "Returns paths relative to the workspace root, newest first (sort: 'modified', "
    f"the default) or by path (sort: 'path'), at most max_results (default "
    f"{GLOB_DEFAULT_RESULTS}), and says how many more matched. Files only, not "
    "folders; .gitignore'd and hidden files are skipped unless no_ignore/hidden.",
    {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "The glob pattern."},
            "path": _FOLDER,
            "sort": {
                "type": "string",
                "enum": ["modified", "path"],
                "description": "'modified' (newest first, default) or 'path'.",
            },
            "type": _TYPE,
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": GLOB_MAX_RESULTS,
                "description": f"Paths to show (default {GLOB_DEFAULT_RESULTS}).",
            },
            "hidden": _HIDDEN,
            "no_ignore": _NO_IGNORE,
        },
        "required": ["pattern"],
    },
    read_only=True,
)

DAEMON_TOOL_SPECS: dict[str, ToolSpec] = {s.name: s for s in (READ_FILE, LIST_DIR, SEARCH, GLOB)}
DAEMON_TOOL_NAMES = list(DAEMON_TOOL_SPECS)

CLIENT_TOOL_SPECS: dict[str, ToolSpec] = {
    "edit_file": ToolSpec(
        "edit_file",
        "Replace an exact piece of text in a workspace file (the editor applies it, undoable).",
        {
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_text": {"type": "string", "description": "Exact text to replace."},
                "new_text": {"type": "string"},
            },
            "required": ["path", "old_text", "new_text"],
        },
    ),
    "write_file": ToolSpec(
        "write_file",
        "Create or overwrite a workspace file with the given content.",
        {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
    "run_command": ToolSpec(
        "run_command",
        "Run a shell command in the workspace (the user approves it). "
        "Returns its output and exit code.",
        {
            "type": "object",
            "properties": {"command": {"type": "string"}, "cwd": _PATH},
            "required": ["command"],
        },
    ),
    "read_file": READ_FILE,
}


def client_tool_specs(declared: list[Any]) -> list[ToolSpec]:
    """Turn an editor's `clientTools` declaration into specs.

    Each entry is a known tool name or a full `{name, description, parameters}`.
    Unknown names without a description are skipped (and reported by the caller).
    """
    specs: list[ToolSpec] = []
    for entry in declared:
        if isinstance(entry, str) and entry in CLIENT_TOOL_SPECS:
            specs.append(CLIENT_TOOL_SPECS[entry])
        elif isinstance(entry, dict) and isinstance(entry.get("name"), str):
            known = CLIENT_TOOL_SPECS.get(entry["name"])
            specs.append(
                ToolSpec(
                    entry["name"],
                    str(entry.get("description") or (known.description if known else "")),
                    dict(entry.get("parameters") or (known.parameters if known else {})),
                    read_only=known.read_only if known else False,
                )
            )
    return specs
