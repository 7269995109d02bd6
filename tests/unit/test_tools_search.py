"""search, glob and list_dir: output, caps, filters, time limits, hostile files."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentd.agent.tools import DaemonTools, ToolConfig
from agentd.agent.tools import search as search_mod
from agentd.agent.tools.args import BadArguments, check_arguments
from agentd.agent.tools.fs import Root
from agentd.agent.tools.ripgrep import find_rg
from agentd.agent.tools.specs import (
    DAEMON_TOOL_SPECS,
    LIST_PER_DIR,
    SEARCH_LINE_CHARS,
    SEARCH_MAX_FILE_BYTES,
)
from agentd.agent.tools.worker import StopToken, run_in_worker
from agentd.errors import ToolError

ENGINES = ["python", "ripgrep"] if find_rg() is not None else ["python"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.name\n")
    (root / "src" / "pkg" / "util.py").write_text("def helper():\n    return main\n")
    (root / "README.md").write_text("# main\nRun main() to start.\n")
    (root / "notes.txt").write_text("nothing to see\n")
    return root


def tools(root: Path, engine: str) -> DaemonTools:
    return DaemonTools(root, ToolConfig(search_engine=engine))


# --- arguments ---------------------------------------------------------------


def test_bad_arguments_are_named() -> None:
    spec = DAEMON_TOOL_SPECS["read_file"].parameters
    assert check_arguments("read_file", spec, {"path": "a", "offset": "12", "x": 1}) == {
        "path": "a",
        "offset": 12,
    }
    with pytest.raises(BadArguments, match="'offset' must be an integer, got 'abc'"):
        check_arguments("read_file", spec, {"path": "a", "offset": "abc"})
    with pytest.raises(BadArguments, match="'path' is required"):
        check_arguments("read_file", spec, {})
    with pytest.raises(BadArguments, match="must be a JSON object"):
        check_arguments("read_file", spec, ["a"])
    search = DAEMON_TOOL_SPECS["search"].parameters
    with pytest.raises(BadArguments, match="'case' must be one of") as err:
        check_arguments("search", search, {"query": "x", "case": "upper", "context": 99})
    assert "'context' must be at most 10" in str(err.value)
    assert check_arguments("search", search, {"query": "x", "glob": "*.py", "regex": "true"}) == {
        "query": "x",
        "glob": ["*.py"],
        "regex": True,
    }


# --- search ------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_results_grouped_by_file_with_context_and_separators(ws: Path, engine: str) -> None:
    t = tools(ws, engine)
    assert t.call("search", query="main") == (
        "README.md\n1:# main\n2:Run main() to start.\n\n"
        "src/app.py\n3:def main():\n\n"
        "src/pkg/util.py\n2:    return main\n"
    )
    out = t.call("search", query="os.name", path="src", context=1)
    assert out == "src/app.py\n3-def main():\n4:    return os.name\n"
    out = t.call("search", query="import|return", regex=True, path="src/app.py", context=0)
    assert out == "src/app.py\n1:import os\n--\n4:    return os.name\n"


@pytest.mark.parametrize("engine", ENGINES)
def test_caps_say_what_was_left_out(ws: Path, engine: str) -> None:
    (ws / "many.txt").write_text("hit\n" * 50)
    t = tools(ws, engine)
    out = t.call("search", query="hit", max_results=3)
    assert out.startswith("many.txt\n1:hit\n2:hit\n3:hit\n")
    assert "[47 more matching lines in 1 file not shown" in out
    files = t.call("search", query="main", files_only=True, max_results=1)
    assert files.startswith("README.md (2 matching lines)\n\n[2 more files in 2 files")


@pytest.mark.parametrize("engine", ENGINES)
def test_long_lines_are_cut_around_the_match(ws: Path, engine: str) -> None:
    (ws / "min.js").write_text("x" * 5000 + "NEEDLE" + "y" * 5000 + "\n")
    out = tools(ws, engine).call("search", query="NEEDLE")
    line = out.split("\n")[1]
    assert "NEEDLE" in line and line.startswith("1:…") and line.endswith("…")
    assert len(line) <= SEARCH_LINE_CHARS + 10


@pytest.mark.parametrize("engine", ENGINES)
def test_filters_narrow_and_never_widen(ws: Path, engine: str) -> None:
    (ws / ".gitignore").write_text("gen_*.py\n")
    (ws / "src" / "gen_x.py").write_text("main = 1\n")
    (ws / "src" / ".hidden.py").write_text("main = 2\n")
    t = tools(ws, engine)
    out = t.call("search", query="main", glob=["*.py"])
    assert "gen_x.py" not in out and ".hidden.py" not in out and "README" not in out
    assert "src/app.py" in out and "src/pkg/util.py" in out
    out = t.call("search", query="main", type="py", path="src", glob=["!pkg/**"])
    assert "src/app.py" in out and "util.py" not in out
    assert ".hidden.py" in t.call("search", query="main", glob=["*.py"], hidden=True)
    assert "gen_x.py" in t.call("search", query="main", no_ignore=True)
    with pytest.raises(ToolError, match="unknown file type"):
        t.call("search", query="main", type="cobol")


@pytest.mark.parametrize("engine", ENGINES)
def test_binary_oversized_and_special_files_are_skipped(ws: Path, engine: str) -> None:
    (ws / "blob.bin").write_bytes(b"main\x00\x01")
    (ws / "huge.txt").write_bytes(b"main\n" + b"." * SEARCH_MAX_FILE_BYTES)
    os.mkfifo(ws / "pipe.txt")
    out = tools(ws, engine).call("search", query="main", files_only=True)
    assert out.split("\n") == [
        "README.md (2 matching lines)",
        "src/app.py (1 matching line)",
        "src/pkg/util.py (1 matching line)",
    ]
    with pytest.raises(ToolError, match="FIFO"):
        tools(ws, engine).call("search", query="main", path="pipe.txt")
    with pytest.raises(ToolError, match="FIFO, not a regular file"):
        tools(ws, engine).call("read_file", path="pipe.txt")


def test_regexes_run_in_linear_time() -> None:
    # Python's `re` needs about 2**40 steps to fail this; RE2 answers at once.
    m = search_mod.Matcher("(a+)+$", regex=True, sensitive=True)
    assert m.first(b"a" * 40 + b"!") is None
    m = search_mod.Matcher("(a+)+!", regex=True, sensitive=True)
    assert m.first(b"a" * 40 + b"!") == 0


def test_smart_case() -> None:
    assert not search_mod.smart_sensitive("main", False)
    assert search_mod.smart_sensitive("Main", False)
    assert not search_mod.smart_sensitive(r"\w+\S\D\p{Lu}", True)
    assert search_mod.smart_sensitive(r"\w+Foo", True)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_time_limit_returns_what_was_found(ws: Path, engine: str) -> None:
    token = StopToken()
    token.expire()
    with Root(ws) as root:
        out = search_mod.run(root, {"query": "main"}, ToolConfig(engine, 7.0), token)
    assert out.text.endswith("[search stopped at its 7 s time limit: results are partial]")


@pytest.mark.parametrize("engine", ENGINES)
async def test_locations_point_at_the_results(ws: Path, engine: str) -> None:
    out = await tools(ws, engine).run("search", {"query": "main", "path": "src"})
    assert [(loc.path, loc.line) for loc in out.locations] == [
        (str(ws / "src" / "app.py"), 3),
        (str(ws / "src" / "pkg" / "util.py"), 2),
    ]
    out = await tools(ws, engine).run("glob", {"pattern": "**/*.py", "sort": "path"})
    assert [loc.path for loc in out.locations] == [
        str(ws / "src" / "app.py"),
        str(ws / "src" / "pkg" / "util.py"),
    ]


# --- glob ----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_glob_newest_first_or_by_path(ws: Path, engine: str) -> None:
    for i, name in enumerate(["src/app.py", "README.md", "src/pkg/util.py", "notes.txt"]):
        os.utime(ws / name, (1_000_000 + i, 1_000_000 + i))
    t = tools(ws, engine)
    assert t.call("glob", pattern="**/*") == "notes.txt\nsrc/pkg/util.py\nREADME.md\nsrc/app.py"
    assert t.call("glob", pattern="*.py", sort="path") == "src/app.py\nsrc/pkg/util.py"
    assert t.call("glob", pattern="pkg/*.py", path="src") == "src/pkg/util.py"
    assert t.call("glob", pattern="src/*.py") == "src/app.py"
    out = t.call("glob", pattern="**", max_results=1, sort="path")
    assert out == (
        "README.md\n\n[3 more files not shown: narrow the pattern or path, "
        "or raise max_results (up to 1000)]"
    )
    assert t.call("glob", pattern="*.rs").startswith("No files match")


# --- list_dir ------------------------------------------------------------------


def test_list_dir_tree_with_sizes_ignores_and_caps(ws: Path) -> None:
    (ws / ".gitignore").write_text("notes.txt\n")
    (ws / ".git").mkdir()
    (ws / "link").symlink_to("README.md")
    os.mkfifo(ws / "fifo")
    t = DaemonTools(ws)
    size = {p: (ws / p).stat().st_size for p in ("src/pkg/util.py", "src/app.py", "README.md")}
    assert t.call("list_dir", depth=3) == (
        "src/\n"
        "  pkg/\n"
        f"    util.py  ({size['src/pkg/util.py']} B)\n"
        f"  app.py  ({size['src/app.py']} B)\n"
        ".gitignore  (10 B)\n"
        f"README.md  ({size['README.md']} B)\n"
        "fifo  [FIFO]\n"
        "link -> README.md\n\n"
        "[2 entries not shown: ignored by .gitignore/.ignore or version-control folders; "
        "no_ignore: true lists the ignored ones]"
    )
    assert "notes.txt" in t.call("list_dir", no_ignore=True)
    for i in range(LIST_PER_DIR + 5):
        (ws / "src" / "pkg" / f"f{i:03}.txt").write_text("")
    out = t.call("list_dir", path="src/pkg")
    assert out.count("\n") == LIST_PER_DIR and out.endswith("… 6 more entries in this folder")
    with pytest.raises(ToolError, match="is a file"):
        t.call("list_dir", path="README.md")


# --- the worker ------------------------------------------------------------------


async def test_a_cancel_kills_the_subprocess_at_once() -> None:
    started = threading.Event()
    procs: list[subprocess.Popen[bytes]] = []

    def work(token: StopToken) -> str:
        proc = token.popen([sys.executable, "-c", "import time; time.sleep(600)"])
        procs.append(proc)
        started.set()
        proc.wait()
        return "done"

    task = asyncio.ensure_future(
        run_in_worker(work, name="sleeper", soft_timeout=None, hard_timeout=600)
    )
    await asyncio.to_thread(started.wait)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Killed by the cancel itself, not at the end of its sleep.
    assert await asyncio.to_thread(procs[0].wait, 30) == -9


async def test_a_stuck_worker_is_not_waited_for() -> None:
    release = threading.Event()

    def stuck(token: StopToken) -> str:
        release.wait()
        return "late"

    task = asyncio.ensure_future(
        run_in_worker(stuck, name="stuck", soft_timeout=None, hard_timeout=600)
    )
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ToolError, match="did not finish within 0 s and was abandoned"):
        await run_in_worker(stuck, name="stuck", soft_timeout=None, hard_timeout=0.01)
    release.set()


def test_special_file_kinds_are_named(tmp_path: Path) -> None:
    from agentd.agent.tools.fs import kind_of

    assert kind_of(stat.S_IFCHR) == "character device"
    assert kind_of(stat.S_IFIFO) == "FIFO"
