"""`agentd memory recall` from a shell over a large memory: cold (no memory
index cache) against warm (the cache a daemon, or an earlier command, wrote).

    python bench/memory_cli_bench.py [--notes 1000] [--runs 5] [--baseline-src DIR]

Generates `--notes` notes (`memory_bench.make_doc`: English technical notes
with identifiers, a tenth in Chinese, Japanese or Korean) in a temp
`$AGENTD_HOME`'s memory folder, last modified an hour ago, then times whole
processes, `python -P -m agentd memory recall WORKSPACE QUERY`, interleaved
`--runs` times: `cold` with the cache removed first (this tree's command
then reads every note, and writes the cache as it exits), `warm` right after
(every note from the cache), and, with `--baseline-src DIR` (a checkout of
another commit, `git archive main | tar -x -C DIR`), that tree's command,
which may not read the cache at all. Each run's stderr (at `--log-level
info`) says how many notes came from the cache; the output of every
variant must be the same docs. Prints JSON, then a markdown table of the
median and the best wall time in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import checkout_env
from memory_bench import make_doc, write_doc

from agentd.layout import memory_dir, memory_index_cache_dir

QUERY = "deploy rollout latency timeout"
_FROM_CACHE = re.compile(rb"(\d+) notes from the (?:index cache|saved index), (\d+) read")


def run_cli(env: dict[str, str], workspace: Path) -> tuple[float, bytes, tuple[int, int] | None]:
    """Wall milliseconds, stdout, and (from cache, read) as the command logged it."""
    command = [sys.executable, "-P", "-m", "agentd", "--log-level", "info"]
    command += ["memory", "recall", str(workspace), QUERY, "--json"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, check=True)
    elapsed = (time.perf_counter() - start) * 1000
    said = _FROM_CACHE.search(done.stderr)
    counts = (int(said.group(1)), int(said.group(2))) if said else None
    return elapsed, done.stdout, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline-src", type=Path, help="also time this source tree's command")
    args = parser.parse_args()
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    tmp = Path(tempfile.mkdtemp(prefix="agentd-memory-cli-bench-"))
    try:
        home = tmp / "home"
        workspace = tmp / "workspace"
        workspace.mkdir()
        folder = memory_dir(workspace.resolve(), home)
        folder.mkdir(parents=True)
        rng = random.Random(7)
        for i in range(args.notes):
            write_doc(folder, i, make_doc(rng, i))
        an_hour_ago = time.time_ns() - 3600 * 10**9
        for path in folder.iterdir():
            os.utime(path, ns=(an_hour_ago, an_hour_ago))
        base_env = {**os.environ, "AGENTD_HOME": str(home)}
        base_env.pop("AGENTD_LOG_LEVEL", None)
        env = checkout_env(base_env, None)
        variants: dict[str, list[float]] = {"cold": [], "warm": []}
        counts: dict[str, Any] = {}
        outputs: dict[str, set[bytes]] = {"cold": set(), "warm": set()}
        if args.baseline_src is not None:
            variants["baseline"] = []
            outputs["baseline"] = set()
        for _ in range(args.runs):
            shutil.rmtree(memory_index_cache_dir(home), ignore_errors=True)
            for name in variants:
                run_env = checkout_env(base_env, args.baseline_src) if name == "baseline" else env
                ms, out, said = run_cli(run_env, workspace)
                variants[name].append(ms)
                outputs[name].add(out)
                counts[name] = said
        docs = {name: [json.loads(o)["docs"] for o in outs] for name, outs in outputs.items()}
        same = all(d == docs["cold"][:1] for d in docs.values())
        result = {
            "notes": args.notes,
            "runs": args.runs,
            "load_average": os.getloadavg(),
            "same_docs": same,
            "from_cache_read": counts,
            "ms": {
                name: {"median": statistics.median(v), "best": min(v), "all": v}
                for name, v in variants.items()
            },
        }
        print(json.dumps(result, indent=2))
        print("\n| variant | median ms | best ms | notes from cache / read |")
        print("| --- | ---: | ---: | --- |")
        for name, v in variants.items():
            said = counts.get(name)
            where = f"{said[0]} / {said[1]}" if said else "(no cache)"
            print(f"| {name} | {statistics.median(v):.0f} | {min(v):.0f} | {where} |")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
