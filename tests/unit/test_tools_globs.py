"""Globs and ignore lines read as ripgrep reads them (cases from ripgrep's own tests)."""

from __future__ import annotations

import pytest

from agentd.agent.tools.globs import GlobError, GlobSet, compile_lines, parse_line, prefixed


def decide(lines: str, path: str, is_dir: bool = False) -> str:
    m = GlobSet(compile_lines(lines)).match(path, is_dir)
    return "none" if m is None else ("whitelist" if m.negated else "ignore")


@pytest.mark.parametrize(
    ("lines", "path", "is_dir", "expected"),
    [
        ("*.log", "a.log", False, "ignore"),
        ("*.log", "x/y/a.log", False, "ignore"),
        ("*.log\n!keep.log", "x/keep.log", False, "whitelist"),
        ("build/", "build", True, "ignore"),
        ("build/", "build", False, "none"),  # folders only
        ("build/", "x/build", True, "ignore"),
        ("/top.txt", "top.txt", False, "ignore"),
        ("/top.txt", "x/top.txt", False, "none"),  # anchored
        ("src/*.py", "src/a.py", False, "ignore"),
        ("src/*.py", "src/x/a.py", False, "none"),  # * stops at /
        ("src/*.py", "y/src/a.py", False, "none"),  # a / anchors the line
        ("a/**/b", "a/b", False, "ignore"),
        ("a/**/b", "a/x/y/b", False, "ignore"),
        ("dir/**", "dir", True, "none"),  # the inside, not the folder
        ("dir/**", "dir/x/y", False, "ignore"),
        ("**", "anything/at/all", False, "ignore"),
        ("[ab]*.md", "b1.md", False, "ignore"),
        ("[!ab]*.md", "c1.md", False, "ignore"),
        ("[!ab]*.md", "a1.md", False, "none"),
        ("*.{md,txt}", "x.txt", False, "ignore"),
        ("?.txt", "ab.txt", False, "none"),
        ("\\#hash", "#hash", False, "ignore"),
        ("# a comment", "# a comment", False, "none"),
        ("\\!bang", "!bang", False, "ignore"),
        ("trailing   ", "trailing", False, "ignore"),
        ("*.py\n!*.py\n*.py", "a.py", False, "ignore"),  # the last line wins
    ],
)
def test_gitignore_semantics(lines: str, path: str, is_dir: bool, expected: str) -> None:
    assert decide(lines, path, is_dir) == expected


def test_a_bad_filter_glob_is_an_error_a_bad_ignore_line_is_skipped() -> None:
    with pytest.raises(GlobError):
        parse_line("[abc", strict=True)
    assert decide("[abc\n*.x", "a.x") == "ignore"


def test_rules_of_an_ancestor_are_reanchored_to_the_root() -> None:
    assert prefixed("*.log", "src") == "src/**/*.log"
    assert prefixed("/build", "src") == "src/build"
    assert prefixed("gen/", "src") == "src/**/gen/"
    assert prefixed("!keep/x", "src/lib") == "!src/lib/keep/x"
    assert prefixed("# note", "src") == "# note"
    assert decide(prefixed("/build", "src"), "src/build", True) == "ignore"
    assert decide(prefixed("/build", "src"), "src/x/build", True) == "none"


def test_a_hostile_ignore_file_cannot_make_matching_slow() -> None:
    # Nested ** would backtrack exponentially in a backtracking engine.
    line = "/".join(["**"] * 30) + "/x"
    deep = "/".join(["a"] * 200) + "/y"
    assert decide(line, deep) == "none"
