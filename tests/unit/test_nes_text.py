"""Positions, ranged changes and edits of next edit suggestions (`agentd.nes`)."""

from __future__ import annotations

import pytest

from agentd.nes.documents import MAX_DOCUMENTS, MAX_SESSION_BYTES, NesSession
from agentd.nes.predict import CURSOR, END, START, parse_reply, region_around
from agentd.nes.text import (
    BadPosition,
    apply_change,
    from_index,
    line_starts,
    minimal_edits,
    to_index,
)

EMOJI = "\U0001f600"  # two UTF-16 code units, four UTF-8 bytes


@pytest.mark.parametrize(("encoding", "after_emoji"), [("utf-16", 3), ("utf-32", 2), ("utf-8", 5)])
def test_positions_count_the_encodings_code_units(encoding: str, after_emoji: int) -> None:
    text = f"a{EMOJI}b\r\nnext"
    starts = line_starts(text)
    assert to_index(text, starts, 0, after_emoji, encoding) == 2
    assert from_index(text, starts, 2, encoding) == (0, after_emoji)
    # CRLF is one line break; a character past the line's end is its end.
    assert to_index(text, starts, 1, 0, encoding) == text.index("next")
    assert to_index(text, starts, 0, 99, encoding) == text.index("\r")


def test_a_position_naming_no_place_is_refused() -> None:
    text = f"a{EMOJI}b\n"
    starts = line_starts(text)
    with pytest.raises(BadPosition):
        to_index(text, starts, 0, 2, "utf-16")  # between the two halves of the pair
    with pytest.raises(BadPosition):
        to_index(text, starts, 0, 3, "utf-8")  # inside its UTF-8 bytes
    with pytest.raises(BadPosition):
        to_index(text, starts, 5, 0, "utf-16")
    # Just past the last line break: the end of the text (an append).
    assert to_index(text, starts, 2, 0, "utf-16") == len(text)
    with pytest.raises(BadPosition):
        apply_change(text, (0, 3), (0, 1), "x", "utf-16")  # ends before it starts


def test_edits_are_per_changed_line_and_trimmed() -> None:
    old = "def f():\n    return 1\n"
    edits = minimal_edits(old, "def f(x):\n    return x\n")
    assert [(e.start, e.end, e.new_text) for e in edits] == [(6, 6, "x"), (20, 21, "x")]
    (inserted,) = minimal_edits("a\nb\n", "a\nnew\nb\n", offset=10)
    assert (inserted.start, inserted.end, inserted.new_text) == (12, 12, "new\n")
    assert minimal_edits(old, old) == []


def test_the_reply_is_read_back_only_between_both_markers() -> None:
    text = "".join(f"line {n}\n" for n in range(20))
    cursor = text.index("line 10") + 4
    region = region_around(text, line_starts(text), cursor)
    assert region.text == "".join(f"line {n}\n" for n in range(5, 16))
    changed = region.text.replace("line 10", f"line ten{CURSOR}")
    prediction = parse_reply(f"Sure:\n{START}\n{changed}{END}\n", region)
    assert prediction is not None
    (edit,) = prediction.edits
    assert text[edit.start : edit.end] == "10" and edit.new_text == "ten"
    assert prediction.cursor == text.index("line 10") + len("line ten")
    assert parse_reply(changed, region) is None
    unchanged = parse_reply(f"{START}\n{region.text}{END}", region)
    assert unchanged is not None and unchanged.edits == []


def test_a_stale_or_bad_change_drops_the_document() -> None:
    session = NesSession("s", ())
    session.open("file:///w/a.py", "python", 2, "abc\n")
    session.change("file:///w/a.py", 3, [{"text": "abd\n"}], "utf-16")
    assert session.documents["file:///w/a.py"].text == "abd\n"
    session.change("file:///w/a.py", 3, [{"text": "late\n"}], "utf-16")
    assert "file:///w/a.py" not in session.documents and session.size == 0
    session.open("file:///w/a.py", "python", 1, "abc\n")
    bad = {"range": {"start": {"line": 9, "character": 0}, "end": {"line": 9, "character": 0}}}
    session.change("file:///w/a.py", 2, [{**bad, "text": "x"}], "utf-16")
    assert "file:///w/a.py" not in session.documents


def test_documents_are_bounded_oldest_first() -> None:
    session = NesSession("s", ())
    for n in range(MAX_DOCUMENTS + 5):
        session.open(f"file:///w/{n}.py", "python", 1, "x")
    assert len(session.documents) == MAX_DOCUMENTS
    assert "file:///w/0.py" not in session.documents
    big = "y" * (1024 * 1024)
    for n in range(10):
        session.open(f"file:///w/big{n}.py", "python", 1, big)
    assert session.size <= MAX_SESSION_BYTES
    assert session.size == sum(d.size for d in session.documents.values())
    assert "file:///w/big9.py" in session.documents


def test_uris_outside_the_folders_are_not_in_the_workspace() -> None:
    from pathlib import Path

    session = NesSession("s", (Path("/w"),))
    assert session.in_workspace("file:///w/src/a.py")
    assert session.in_workspace("file://localhost/w/a%20b.py")
    for uri in ("file:///w/../etc/passwd", "file:///wx/a.py", "untitled:1", "file://host/w/a"):
        assert not session.in_workspace(uri)


@pytest.mark.parametrize(
    "text", ["", "a", "a\n", "\n\n", "a\nb", "a\r\nb\rc\n", "\r\r\n\n", "x\u2028y\x0bz\n"]
)
def test_line_starts_count_lsps_three_line_ends_only(text: str) -> None:
    expected = [0]
    i = 0
    while i < len(text):
        if text.startswith("\r\n", i):
            i += 2
        elif text[i] in "\r\n":
            i += 1
        else:
            i += 1
            continue
        expected.append(i)
    assert line_starts(text) == expected
    # The first lines only (a ranged change reads no further than it needs).
    for count in range(1, len(expected) + 2):
        assert line_starts(text, count) == expected[:count]
