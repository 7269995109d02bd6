"""Positions, ranged changes and minimal edits over a document's text (stdlib only).

A position is (line, character) as LSP and ACP say it: the character counted
in the negotiated encoding's code units (UTF-16 unless `initialize` settled
on another). Line ends are `\\n`, `\\r\\n` and `\\r`, as LSP counts them.

`BadPosition` is raised for a position that names no place in the text (a
line past the end, a character inside a UTF-16 surrogate pair or a UTF-8
sequence): the caller drops what it was applying rather than guess, so a
document is never kept with a wrong text. A character past the end of its
line means the line's end (LSP's rule).
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


class BadPosition(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace text[start:end] (str indexes) with `new_text`."""

    start: int
    end: int
    new_text: str


def line_starts(text: str, count: int | None = None) -> list[int]:
    """Where each line starts (str indexes), line ends as LSP counts them:
    all of them, or (`count`) the first `count` at most."""
    if "\r" not in text:
        # Only `\n`: split in C and summed in C, several times faster than
        # matching each line end (a 1 MiB document is typed into), and
        # stopped early when only the first lines are wanted.
        parts = text.split("\n") if count is None else text.split("\n", max(0, count - 1))
        lengths = map(_plus_one, map(len, parts[:-1]))
        return list(itertools.accumulate(lengths, initial=0))
    starts = [0, *(m.end() for m in _LINE_END.finditer(text))]
    return starts if count is None else starts[:count]


_plus_one = (1).__add__


def _units(ch: str, encoding: str) -> int:
    code = ord(ch)
    if encoding == "utf-32":
        return 1
    if encoding == "utf-16":
        return 2 if code > 0xFFFF else 1
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def _line_end(text: str, starts: list[int], line: int) -> int:
    """The index where `line`'s content ends (before its line break)."""
    if line + 1 < len(starts):
        end = starts[line + 1]
        if text[end - 2 : end] == "\r\n":
            return end - 2
        return end - 1
    return len(text)


def to_index(text: str, starts: list[int], line: int, character: int, encoding: str) -> int:
    """The str index of a position; `BadPosition` if it names no place."""
    if line < 0 or character < 0:
        raise BadPosition("negative position")
    if line >= len(starts):
        # The position just past the last line (line = line count, character 0):
        # the end of the text, which some editors send for an append.
        if line == len(starts) and character == 0 and text.endswith(("\n", "\r")):
            return len(text)
        raise BadPosition(f"line {line} is past the end ({len(starts)} lines)")
    index = starts[line]
    end = _line_end(text, starts, line)
    if encoding == "utf-32":
        return min(index + character, end)
    units = 0
    while index < end and units < character:
        units += _units(text[index], encoding)
        index += 1
    if units > character:
        raise BadPosition("the character falls inside a character's code units")
    return index


def from_index(text: str, starts: list[int], index: int, encoding: str) -> tuple[int, int]:
    """(line, character) of a str index."""
    line = bisect_right(starts, index) - 1
    return line, width(text[starts[line] : index], encoding)


def width(segment: str, encoding: str) -> int:
    """How many of the encoding's code units `segment` takes."""
    if encoding == "utf-32":
        return len(segment)
    if encoding == "utf-16":
        return len(segment) + sum(1 for c in segment if ord(c) > 0xFFFF)
    return len(segment.encode("utf-8", "surrogatepass"))


def apply_change(
    text: str, start: tuple[int, int], end: tuple[int, int], new: str, enc: str
) -> str:
    """`text` with the range start..end replaced by `new`; `BadPosition` for a bad range."""
    # The starts up to the line after the range's last: where that line ends,
    # and whether it exists, are known without reading the rest.
    starts = line_starts(text, max(start[0], end[0]) + 2)
    a = to_index(text, starts, *start, enc)
    b = to_index(text, starts, *end, enc)
    if b < a:
        raise BadPosition("the range ends before it starts")
    return text[:a] + new + text[b:]


def minimal_edits(old: str, new: str, offset: int = 0) -> list[Edit]:
    """Edits turning `old` into `new`, each as small as the line diff allows:
    changed runs of lines, trimmed of the characters they share at both ends.
    Indexes are shifted by `offset` (where `old` starts in its document)."""
    if old == new:
        return []
    import difflib  # only once a suggestion is made: start-up imports this module

    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    old_at = [0]
    for line in old_lines:
        old_at.append(old_at[-1] + len(line))
    edits: list[Edit] = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            # As many lines as before: each changed line is its own edit.
            for k in range(i2 - i1):
                if old_lines[i1 + k] != new_lines[j1 + k]:
                    edits.append(
                        _trimmed(old_lines[i1 + k], new_lines[j1 + k], offset + old_at[i1 + k])
                    )
            continue
        a, b = "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])
        edits.append(_trimmed(a, b, offset + old_at[i1]))
    return edits


def _trimmed(a: str, b: str, at: int) -> Edit:
    """The edit turning `a` (at index `at`) into `b`, without their common ends."""
    prefix = _common_prefix(a, b)
    suffix = _common_prefix(a[prefix:][::-1], b[prefix:][::-1])
    return Edit(at + prefix, at + len(a) - suffix, b[prefix : len(b) - suffix])


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
