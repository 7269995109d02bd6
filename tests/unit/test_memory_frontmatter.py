from __future__ import annotations

from pathlib import Path

from agentd.memory.frontmatter import parse_front_matter
from agentd.memory.store import parse_topic


def _topic(text: str, name: str = "note.md"):  # type: ignore[no-untyped-def]
    data = text.encode()
    return parse_topic(Path("/m") / name, data, size=len(data), mtime=0.0, team=False)


def test_good_front_matter() -> None:
    doc = _topic(
        "---\nname: Release process\ndescription: How we ship  # a comment\n"
        "type: project\n---\n\n# Steps\nTag, build, ship.\n"
    )
    assert doc.info.name == "Release process"
    assert doc.info.description == "How we ship"
    assert doc.info.type == "project"
    assert doc.info.problems == ()
    assert doc.body == "# Steps\nTag, build, ship."


def test_quoted_and_block_values() -> None:
    fm = parse_front_matter(
        '---\nname: "Quoted: \\"x\\" #not comment"\n'
        "description: 'it''s fine'\n"
        "type: >\n  feedback\n"
        "notes: |\n  line one\n  line two\n"
        "tags:\n  - a\n  - b\n"
        "---\nbody\n"
    )
    assert fm.fields["name"] == 'Quoted: "x" #not comment'
    assert fm.fields["description"] == "it's fine"
    assert fm.fields["type"] == "feedback"
    assert fm.fields["notes"] == "line one\nline two"
    assert fm.fields["tags"] == "a, b"
    assert fm.problems == ()


def test_multiline_plain_value_and_crlf_and_bom() -> None:
    fm = parse_front_matter(
        "\ufeff---\r\nname: a long\r\n  name here\r\ntype: user\r\n---\r\nbody\r\n"
    )
    assert fm.fields == {"name": "a long name here", "type": "user"}
    assert fm.body == "body"


def test_missing_front_matter_keeps_file_indexed() -> None:
    doc = _topic("Just a note about deployments.\n", name="deploy-notes.md")
    assert doc.info.name == "deploy-notes"  # from the file name
    assert doc.info.description == ""
    assert doc.body.startswith("Just a note")
    assert doc.info.problems == ("no front matter",)


def test_unclosed_front_matter_becomes_body() -> None:
    doc = _topic("---\nname: Broken\nthe rest of the file\n")
    assert "not closed" in doc.info.problems[0]
    assert "the rest of the file" in doc.body
    assert doc.info.name == "note"


def test_broken_lines_missing_fields_and_unknown_type() -> None:
    doc = _topic(
        '---\nname: "unterminated\n: no key\n  stray indent\ntype: Secret\n'
        "type: secret\n---\nbody text\n"
    )
    problems = " | ".join(doc.info.problems)
    assert "unterminated quoted value" in problems
    assert "line 3 not understood" in problems
    assert "appears twice" in problems
    assert "front matter has no 'description'" in problems
    assert "unknown type 'secret'" in problems
    assert doc.info.name == "unterminated"  # what could be read is used
    assert doc.body == "body text"


def test_header_values_are_bounded_and_one_line() -> None:
    doc = _topic("---\nname: |\n  a\n  b\ndescription: " + "x" * 5000 + "\ntype: user\n---\n")
    assert doc.info.name == "a b"
    assert len(doc.info.description) == 500
