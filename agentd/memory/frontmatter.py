"""Front matter of a memory topic file: the small YAML subset memory files use.

A topic file starts with ``---``, a few ``key: value`` lines, and ``---``. We
parse that subset ourselves (plain, single- and double-quoted scalars, ``|`` and
``>`` block scalars, indented continuation lines) rather than depend on a YAML
library: the fields are three strings, and a broken header must never hide the
file, so every failure becomes a problem string next to whatever could be read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^---[ \t]*$")
_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$")
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:(?:[ \t]+(.*)|[ \t]*)$")
_INDENT = (" ", "\t")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "/": "/", "r": "\r", "0": "\0"}
# A header longer than this is not a header: stop looking for its end.
MAX_HEADER_LINES = 200


@dataclass(frozen=True)
class FrontMatter:
    fields: dict[str, str]
    body: str
    present: bool
    problems: tuple[str, ...]


def _double_quoted(raw: str) -> tuple[str, bool]:
    """Value of a ``"..."`` scalar, and whether it was properly closed."""
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            out.append(_ESCAPES.get(raw[i + 1], raw[i + 1]))
            i += 2
            continue
        if ch == '"':
            rest = raw[i + 1 :].strip()
            return "".join(out), rest == "" or rest.startswith("#")
        out.append(ch)
        i += 1
    return "".join(out), False


def _single_quoted(raw: str) -> tuple[str, bool]:
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "'":
            if raw[i + 1 : i + 2] == "'":
                out.append("'")
                i += 2
                continue
            rest = raw[i + 1 :].strip()
            return "".join(out), rest == "" or rest.startswith("#")
        out.append(ch)
        i += 1
    return "".join(out), False


def _plain(raw: str) -> str:
    # YAML starts a comment at " #"; a bare "#" inside a word is text.
    cut = raw.find(" #")
    return (raw if cut < 0 else raw[:cut]).strip()


def _parse_header(lines: list[str], first_lineno: int) -> tuple[dict[str, str], list[str]]:
    fields: dict[str, str] = {}
    problems: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        lineno = first_lineno + i
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = None if line.startswith(_INDENT) else _KEY.match(line)
        if match is None:
            problems.append(f"front matter line {lineno} not understood")
            continue
        key, raw = match.group(1), (match.group(2) or "").strip()
        # Indented lines after the key belong to it (continuations, block scalars, lists).
        block: list[str] = []
        while i < len(lines) and (lines[i].startswith(_INDENT) or not lines[i].strip()):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            block.pop()
        value: str
        if not block and raw[:1] not in ("|", ">", '"', "'"):
            value = _plain(raw)  # the common `key: value` line, as the last branch reads it
        elif raw[:1] in ("|", ">"):
            texts = [b.strip() for b in block]
            value = "\n".join(texts) if raw[0] == "|" else " ".join(t for t in texts if t)
        elif raw.startswith('"'):
            value, closed = _double_quoted(" ".join([raw, *(b.strip() for b in block)]))
            if not closed:
                problems.append(f"front matter '{key}': unterminated quoted value")
        elif raw.startswith("'"):
            value, closed = _single_quoted(" ".join([raw, *(b.strip() for b in block)]))
            if not closed:
                problems.append(f"front matter '{key}': unterminated quoted value")
        elif raw == "" and block and block[0].lstrip().startswith("- "):
            # A list: keep the items as one comma-separated string.
            value = ", ".join(b.strip()[2:].strip() for b in block if b.strip().startswith("- "))
        else:
            value = " ".join(t for t in [_plain(raw), *(_plain(b) for b in block)] if t)
        if key in fields:
            problems.append(f"front matter '{key}' appears twice; the last one wins")
        fields[key] = value
    return fields, problems


def parse_front_matter(text: str) -> FrontMatter:
    """Split ``text`` into header fields and body. Never raises."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.splitlines()
    if not lines or not _FENCE.match(lines[0]):
        return FrontMatter({}, text, False, ("no front matter",))
    end = None
    for n in range(1, min(len(lines), MAX_HEADER_LINES + 1)):
        if _CLOSE.match(lines[n]):
            end = n
            break
    if end is None:
        # Unclosed: the whole file is treated as body so nothing is lost.
        return FrontMatter({}, text, False, ("front matter is not closed (no ending '---')",))
    fields, problems = _parse_header(lines[1:end], 2)
    body = "\n".join(lines[end + 1 :]).strip("\n")
    return FrontMatter(fields, body, True, tuple(problems))
