"""The input-stream fuzzer of tests/reliability/test_fuzz.py, run for longer.

    python bench/fuzz.py [--seconds 150] [--json FILE]

One daemon per strategy (random bytes, valid-looking JSON-RPC messages,
mutated real messages over LSP; hostile values over LSP and over ACP:
numbers of more than 4,300 digits, nesting up to 100,000 levels, lone
surrogates in prompts, tool results and tool-call arguments, against a live
model server), each fed for `--seconds`/5 seconds of hypothesis examples.
Fails (exit 1) when the daemon dies, stops answering, answers a prompt with
-32603, cannot answer a last prompt, or ends with an RSS over --rss-bound
MiB; reports examples run and RSS before/after.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.testing.model_server import ModelServerThread
from tests.reliability.fuzzing import (
    Framing,
    FuzzDaemon,
    fuzz_env,
    hostile_input,
    message_input,
    mutated_input,
    random_bytes_input,
)


class _TimeUp(Exception):
    pass


def run(
    name: str,
    strategy: Any,
    seconds: float,
    bound: float,
    framing: Framing = "lsp",
    server: ModelServerThread | None = None,
) -> dict[str, Any]:
    """`server`: the strategy's inputs are hostile values (bodies, prompts)."""
    with tempfile.TemporaryDirectory(prefix="agentd-fuzz-") as d:
        env = fuzz_env(Path(d), server.openai_base_url) if server else fuzz_env(Path(d))
        daemon = FuzzDaemon(env, Path(d), framing)
        try:
            daemon.initialize()
            rss_start = daemon.rss_mib()
            deadline = time.time() + seconds
            peak = rss_start

            @settings(
                max_examples=10**9,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(data=strategy)
            def feed(data: Any) -> None:
                nonlocal peak
                if time.time() > deadline:
                    raise _TimeUp
                if server is not None:
                    daemon.feed_bodies(*data)
                else:
                    daemon.feed(data)
                if daemon.examples % 100 == 0:
                    peak = max(peak, daemon.rss_mib())

            try:
                feed()
            except _TimeUp:
                pass
            last_prompt_ok = True
            if server is not None:
                reply = daemon.prompt("still there?")
                last_prompt_ok = reply.get("result", {}).get("stopReason") == "end_turn"
            rss_end = daemon.rss_mib()
            code = daemon.finish()
            return {
                "strategy": name,
                "examples": daemon.examples,
                "seconds": seconds,
                "rssMiB": {
                    "start": round(rss_start, 1),
                    "peak": round(peak, 1),
                    "end": round(rss_end, 1),
                },
                "exitCode": code,
                "ok": code == 0 and max(peak, rss_end) < bound and last_prompt_ok,
            }
        finally:
            daemon.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--rss-bound", type=float, default=400.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    strategies: list[tuple[str, st.SearchStrategy[list[bytes]]]] = [
        ("random bytes", random_bytes_input()),
        ("valid-looking messages", message_input()),
        ("mutated real messages", mutated_input()),
    ]
    share = args.seconds / (len(strategies) + 2)
    results = [run(n, s, share, args.rss_bound) for n, s in strategies]
    with ModelServerThread() as server:
        for framing in ("lsp", "acp"):
            name = f"hostile values ({framing.upper()})"
            strategy = hostile_input(framing)
            results.append(run(name, strategy, share, args.rss_bound, framing, server))
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    print("| strategy | examples | RSS start / peak / end (MiB) | exit | ok |", file=sys.stderr)
    print("| --- | --- | --- | --- | --- |", file=sys.stderr)
    for r in results:
        m = r["rssMiB"]
        print(
            f"| {r['strategy']} | {r['examples']} | {m['start']} / {m['peak']} / {m['end']} "
            f"| {r['exitCode']} | {r['ok']} |",
            file=sys.stderr,
        )
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
