"""A session of several roots (ACP `additionalDirectories`): which root a path
belongs to, the checks of the entries, and the list kept in the transcript."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.agent.session import AwaitClientResult, Session
from agentd.agent.tools import DaemonTools
from agentd.errors import InvalidParams, PathOutsideWorkspace
from agentd.messages import Message, TextPart
from agentd.params import MAX_ADDITIONAL_ROOTS, additional_roots
from agentd.paths import pin_root, resolve_in_roots, root_of
from agentd.transcript import SessionCatalog, TranscriptWriter, load, sessions_dir


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace root and an additional one, each with a file; a folder
    named like the additional root with a suffix, and a file outside both."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("MAIN = 1\n")
    extra = tmp_path / "extra"
    (extra / "lib").mkdir(parents=True)
    (extra / "lib" / "util.py").write_text("UTIL = 2\n")
    (tmp_path / "extra-evil").mkdir()
    (tmp_path / "extra-evil" / "secret.txt").write_text("secret\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    return pin_root(ws), pin_root(extra)


def test_a_path_belongs_to_the_root_that_holds_it(roots: tuple[Path, Path]) -> None:
    ws, extra = roots
    both = [ws, extra]
    assert root_of(both, "src/main.py") == ws  # relative: the working directory's
    assert root_of(both, str(ws / "src")) == ws
    assert root_of(both, str(extra / "lib" / "util.py")) == extra
    assert resolve_in_roots(both, str(extra / "lib")) == extra / "lib"
    # One root: everything is its own (`resolve_inside` says why not).
    assert root_of([ws], str(extra)) == ws


@pytest.mark.parametrize(
    "path",
    [
        "../extra/lib/util.py",  # relative paths stay the working directory's
        "{tmp}/extra-evil/secret.txt",  # a sibling sharing the name's start
        "{tmp}/outside.txt",
        "{tmp}/extra/../outside.txt",
        "{tmp}/extra/a\x00b",
    ],
)
def test_paths_in_no_root_are_refused(roots: tuple[Path, Path], path: str) -> None:
    ws, extra = roots
    with pytest.raises(PathOutsideWorkspace):
        resolve_in_roots([ws, extra], path.format(tmp=ws.parent))


def test_daemon_tools_work_in_every_root_and_say_which(roots: tuple[Path, Path]) -> None:
    ws, extra = roots
    tools = DaemonTools(ws, extra_roots=[extra])
    assert tools.call("read_file", path=str(extra / "lib" / "util.py")) == "1  UTIL = 2"
    assert tools.call("read_file", path="src/main.py") == "1  MAIN = 1"
    listing = tools.call("list_dir", path=str(extra))
    assert listing.startswith(f"(paths relative to {extra})\n")
    assert "lib/" in listing
    found = tools.call("search", query="UTIL", path=str(extra))
    assert found.startswith(f"(paths relative to {extra})\n") and "lib/util.py" in found
    # Without a path: the working directory only.
    assert "util.py" not in tools.call("glob", pattern="*.py")
    # Without the additional root, the same path is refused.
    with pytest.raises(PathOutsideWorkspace):
        DaemonTools(ws).call("read_file", path=str(extra / "lib" / "util.py"))


def test_a_symlink_out_of_an_additional_root_is_refused(roots: tuple[Path, Path]) -> None:
    ws, extra = roots
    (extra / "leak").symlink_to(ws.parent / "outside.txt")
    (extra / "into-ws").symlink_to(ws / "src" / "main.py")
    tools = DaemonTools(ws, extra_roots=[extra])
    with pytest.raises(PathOutsideWorkspace, match="outside the workspace roots"):
        tools.call("read_file", path=str(extra / "leak"))
    # A link from one root into another stays inside the roots.
    assert tools.call("read_file", path=str(extra / "into-ws")) == "1  MAIN = 1"


def test_an_additional_root_put_elsewhere_later_is_refused(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, extra = roots
    tools = DaemonTools(ws, extra_roots=[extra])
    assert tools.call("read_file", path=str(extra / "lib" / "util.py"))
    extra.rename(tmp_path / "moved")
    extra.symlink_to(tmp_path / "extra-evil")
    with pytest.raises(PathOutsideWorkspace, match="now leads to"):
        tools.call("read_file", path=str(extra / "secret.txt"))
    assert tools.call("read_file", path="src/main.py") == "1  MAIN = 1"  # the others still work


def fields(error: InvalidParams) -> list[str]:
    assert isinstance(error.data, dict)
    return [f["field"] for f in error.data["fields"]]


def test_entries_are_resolved_and_the_root_and_repeats_dropped(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, extra = roots
    (tmp_path / "link").symlink_to(extra)
    given = [str(ws), str(extra), f"{extra}/lib/..", str(tmp_path / "link"), extra.as_uri()]
    assert additional_roots(given, ws) == [extra]
    assert additional_roots([], ws) == []
    # The session drops its root when the front end could not (an LSP load).
    session = Session("s", ws, AwaitClientResult([]), additional_roots=[ws, extra, extra])
    assert session.roots == [ws, extra]


@pytest.mark.parametrize(
    "bad",
    ["relative/dir", "{tmp}/nowhere", "{tmp}/outside.txt", "/dev/null", "{tmp}/\ud800",
     "{tmp}/a\x00b", "/" + "a" * 5000, "{tmp}/fifo"],
)  # fmt: skip
def test_bad_entries_are_refused_naming_the_entry(
    roots: tuple[Path, Path], tmp_path: Path, bad: str
) -> None:
    ws, extra = roots
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InvalidParams) as info:
        additional_roots([str(extra), bad.format(tmp=tmp_path)], ws)
    assert fields(info.value) == ["additionalDirectories.1"]


def test_too_many_entries_are_refused_before_any_is_looked_at(roots: tuple[Path, Path]) -> None:
    ws, _ = roots
    with pytest.raises(InvalidParams) as info:
        additional_roots(["relative"] * (MAX_ADDITIONAL_ROOTS + 1), ws)
    assert fields(info.value) == ["additionalDirectories"]


def test_the_list_is_kept_in_the_transcript_and_its_meta_file(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, extra = roots
    home = tmp_path / "home"
    path = sessions_dir(ws, home) / "s1.jsonl"
    writer = TranscriptWriter(path, "s1", ws, fresh=True)
    writer.set_additional_roots([str(extra)])
    assert not path.exists()  # a session never prompted leaves nothing
    writer.append(Message("user", [TextPart("hello")]))
    writer.write_due_meta()
    writer.close()
    loaded = load(path)
    assert loaded is not None and loaded.additional_roots == [str(extra)]
    (info,) = SessionCatalog(home).list(ws)
    assert info.additional_roots == (str(extra),)

    # A load that names another list: nothing written until the next line.
    again = TranscriptWriter(path, "s1", ws, loaded.total, additional_roots=[str(extra)])
    again.set_additional_roots([])
    assert load(path).additional_roots == [str(extra)]  # type: ignore[union-attr]
    again.append(Message("user", [TextPart("more")]))
    again.close()
    assert load(path).additional_roots == []  # type: ignore[union-attr]
    (info,) = SessionCatalog(home).list(ws)
    assert info.additional_roots == ()


def test_a_restored_root_replaced_by_a_symlink_since_is_refused(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, _ = roots
    # Stored (resolved) by an earlier daemon; meanwhile made a symlink to elsewhere.
    stored = tmp_path / "stored-extra"
    stored.symlink_to(tmp_path / "extra-evil")
    session = Session("s", ws, AwaitClientResult([]), additional_roots=[stored])
    tools = DaemonTools(ws, extra_roots=session.additional_roots)
    with pytest.raises(PathOutsideWorkspace, match="now leads to"):
        tools.call("read_file", path=str(stored / "secret.txt"))
