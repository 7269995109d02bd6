"""Prompt caching over a long tool-using session, for both APIs.

    python bench/cache_bench.py [--steps 30] [--prompts 3] [--api both|openai|anthropic]
                                [--file-kb 1.5] [--agents-kb 8]
                                [--client-tools edit_file,write_file,run_command]
                                [--baseline-src DIR] [--json FILE] [--table]

One session of `--steps` model steps split over `--prompts` prompts (each
prompt: read_file calls, then an answer), memory on (20 topic files; the
local tier's reminders at each prompt, the model tier's at tool results),
an AGENTS.md of `--agents-kb`, workspace files of `--file-kb` and the
client tools an editor declares (`--client-tools`, never called), against
the bundled model server with its prompt cache emulation at the APIs'
defaults (1,024-token minimum, five-minute entries; `cache.py` there). The
daemon is spawned as an editor spawns it, the requests are real HTTP.

Per step, from the model server's accounting (the same yardstick for a
baseline daemon, which reports no cache figures): the fraction of the
request's input tokens served from the cache (goal >= 90 % from the third
step on); the most any client could be served, the previous request's
tokens over this one's (each step's new content is new to the cache: the
goal is within reach only where a step adds under a tenth of the request);
and the fraction of the previous request's tokens served again (what the
client controls: 100 % when each request starts with the previous one byte
for byte; OpenAI's 128-token steps take a little). Per
transition, whether the request's prefix was byte-identical to the previous
request except where the history grew: the prompt as each API caches it
(OpenAI: tools, then messages; Anthropic: tools, system blocks, message
blocks, `cache_control` marks set aside), segment by segment, and for the
new code the request body's bytes themselves. For the new code, the
daemon's own usage updates are checked against the server's figures.

`--baseline-src DIR` runs the same with the daemon of another source tree
(`git archive main agentd | tar -x -C DIR`) side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Updates,
    add_output_args,
    baseline_daemon,
    bench_env,
    emit,
    fmt,
    markdown_table,
    project_memory_dir,
    start_agentd,
    summary,
    write_topics,
)

from agentd.testing.model_server import ModelServer

GOAL = 0.90
GOAL_FROM_STEP = 3
PROMPTS = [
    "how do we ship a release to production? read the modules first",
    "what postgres connection pool size do we use, and where is it set?",
    "how are redis cache keys named in these modules?",
    "explain the oauth token refresh flow in the code",
]


# --- the prompt as each API caches it -------------------------------------------------------


def _strip_marks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_marks(v) for v in value]
    return value


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def segments(api: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, bytes) of each piece of the cached prompt, in the API's order."""
    out: list[tuple[str, str]] = []
    if api == "openai":
        if body.get("tools"):
            out.append(("tools", _dumps(body["tools"])))
        for i, msg in enumerate(body.get("messages") or ()):
            out.append((f"messages[{i}] ({msg.get('role')})", _dumps(msg)))
        return out
    body = _strip_marks(body)
    for tool in body.get("tools") or ():
        out.append((f"tool {tool.get('name')}", _dumps(tool)))
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    out += [("system", _dumps(b)) for b in blocks]
    for i, msg in enumerate(body.get("messages") or ()):
        content = msg.get("content")
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for j, block in enumerate(items or ()):
            out.append((f"messages[{i}].content[{j}] ({msg.get('role')})", _dumps(block)))
    return out


def prefix_check(api: str, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    a, b = segments(api, before), segments(api, after)
    same = 0
    while same < len(a) and same < len(b) and a[same][1] == b[same][1]:
        same += 1
    total = sum(len(s) for _, s in a)
    kept = sum(len(s) for _, s in a[:same])
    out: dict[str, Any] = {
        "identical": same == len(a),
        "resent_identical_fraction": round(kept / total, 4) if total else 1.0,
    }
    if same < len(a):
        out["first_difference"] = a[same][0]
    # The request bodies themselves: the previous body, without its closing
    # "]}", must begin the next one (messages come last, marks set aside).
    raw_a, raw_b = _dumps(_strip_marks(before)), _dumps(_strip_marks(after))
    out["body_bytes_prefix"] = raw_b.startswith(raw_a[:-2]) if raw_a.endswith("]}") else False
    return out


# --- one run ------------------------------------------------------------------------------


def plan(steps: int, prompts: int) -> list[int]:
    """Model steps per prompt (each at least 2: a tool call and an answer)."""
    base, extra = divmod(steps, prompts)
    return [base + (1 if i < extra else 0) for i in range(prompts)]


async def run(api: str, args: argparse.Namespace, baseline: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentd-cache-bench-") as tmp_name:
        tmp = Path(tmp_name)
        ws = tmp / "ws"
        ws.mkdir()
        filler = "def handler(request):\n    return service.call(request)  # keep it simple\n"
        body = (filler * (int(args.file_kb * 1024) // len(filler) + 1))[: int(args.file_kb * 1024)]
        for i in range(args.steps):
            (ws / f"mod_{i:02d}.py").write_text(f"# module {i}\n{body}")
        rule = "- Keep functions small; name things for what they hold; test every change.\n"
        agents = (rule * (int(args.agents_kb * 1024) // len(rule) + 1))[
            : int(args.agents_kb * 1024)
        ]
        (ws / "AGENTS.md").write_text(agents)
        topics = write_topics(project_memory_dir(ws, tmp))
        server = ModelServer()
        await server.start()
        try:
            # The model tier picks one note at each prompt: reminders at tool results.
            server.set_default_arguments("select_memories", {"paths": [str(topics[-1])]})
            per_prompt = plan(args.steps, args.prompts)
            n = 0
            for steps in per_prompt:
                for _ in range(steps - 1):
                    call = {"name": "read_file", "arguments": {"path": f"mod_{n:02d}.py"}}
                    server.enqueue({"toolCalls": [call]})
                    n += 1
                server.enqueue({"text": "Here is what the modules do, in short."})
            if api == "anthropic":
                env = bench_env(server.base_url, tmp)
                env.update(AGENTD_PROVIDER="anthropic", AGENTD_MODEL="claude-sonnet-4-5")
            else:
                env = bench_env(server.openai_base_url, tmp)
            command = None
            if baseline is not None:
                command, env = baseline_daemon(env, baseline)
            updates = Updates()
            options = {"clientTools": [t for t in args.client_tools.split(",") if t]}
            client = await start_agentd(env, options, updates, command)
            try:
                root = {"workspaceRoot": str(ws)}
                await client.request("memory/status", root)  # the index is built
                sid = (await client.request("agent/newSession", root))["sessionId"]
                started = time.perf_counter()
                for i in range(len(per_prompt)):
                    prompt = {"sessionId": sid, "prompt": PROMPTS[i % len(PROMPTS)]}
                    result = await client.request("agent/prompt", prompt)
                    if result.get("stopReason") != "end_turn":
                        raise RuntimeError(f"prompt {i} ended with {result}")
                elapsed = time.perf_counter() - started
            finally:
                await client.shutdown()
            mains = server.requests("main")
        finally:
            await server.stop()
    return analyse(api, mains, updates.of(sid, "usage"), elapsed, baseline)


def analyse(
    api: str,
    mains: list[dict[str, Any]],
    usage: list[dict[str, Any]],
    elapsed: float,
    baseline: Path | None,
) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for i, req in enumerate(mains):
        cache = req["cache"]
        step: dict[str, Any] = {
            "step": i + 1,
            "input_tokens": cache["input"],
            "cache_read": cache["read"],
            "cache_write": cache["write"],
            "served_fraction": round(cache["read"] / cache["input"], 4),
        }
        if i:
            previous = mains[i - 1]["cache"]["input"]
            step["previous_resent_fraction"] = round(min(1.0, cache["read"] / previous), 4)
            step["most_possible_fraction"] = round(min(1.0, previous / cache["input"]), 4)
            step["prefix"] = prefix_check(api, mains[i - 1]["body"], req["body"])
        if i < len(usage):
            reported = usage[i]
            step["reported_by_agentd"] = {
                k: reported[k]
                for k in ("inputTokens", "cacheReadTokens", "cacheWriteTokens")
                if k in reported
            }
        steps.append(step)
    late = [s["served_fraction"] for s in steps if s["step"] >= GOAL_FROM_STEP]
    transitions = [s["prefix"] for s in steps if "prefix" in s]
    agrees = all(
        s.get("reported_by_agentd", {}).get("cacheReadTokens") == s["cache_read"]
        and s.get("reported_by_agentd", {}).get("inputTokens") == s["input_tokens"]
        for s in steps
    )
    return {
        "api": api,
        "daemon": str(baseline) if baseline else "this tree",
        "steps": len(steps),
        "seconds": round(elapsed, 2),
        "served_fraction_from_step_3": summary(late, 4),
        "steps_from_3_meeting_goal": sum(f >= GOAL for f in late),
        "steps_from_3": len(late),
        "most_possible_from_step_3": summary(
            [s["most_possible_fraction"] for s in steps if s["step"] >= GOAL_FROM_STEP], 4
        ),
        "previous_resent_fraction": summary(
            [s["previous_resent_fraction"] for s in steps if "previous_resent_fraction" in s], 4
        ),
        "prefix_identical_transitions": sum(t["identical"] for t in transitions),
        "body_bytes_prefix_transitions": sum(t["body_bytes_prefix"] for t in transitions),
        "transitions": len(transitions),
        "first_differences": sorted(
            {t["first_difference"] for t in transitions if "first_difference" in t}
        ),
        "agentd_reports_match_server": agrees if usage and baseline is None else None,
        "tokens": {
            "first_request": steps[0]["input_tokens"] if steps else 0,
            "last_request": steps[-1]["input_tokens"] if steps else 0,
            "read_total": sum(s["cache_read"] for s in steps),
            "input_total": sum(s["input_tokens"] for s in steps),
        },
        "per_step": steps,
    }


def table(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        late = r["served_fraction_from_step_3"]
        bound = r["most_possible_from_step_3"]
        prev = r["previous_resent_fraction"]
        rows.append(
            [
                f"{r['api']}{' [baseline]' if r['daemon'] != 'this tree' else ''}",
                f"{fmt(late.get('min', float('nan')) * 100, ' %', 1)} / "
                f"{fmt(late.get('median', float('nan')) * 100, ' %', 1)}",
                f"{r['steps_from_3_meeting_goal']} / {r['steps_from_3']}",
                f"{fmt(bound.get('min', float('nan')) * 100, ' %', 1)} / "
                f"{fmt(bound.get('median', float('nan')) * 100, ' %', 1)}",
                f"{fmt(prev.get('min', float('nan')) * 100, ' %', 1)} / "
                f"{fmt(prev.get('median', float('nan')) * 100, ' %', 1)}",
                f"{r['prefix_identical_transitions']} / {r['transitions']}",
                f"{r['body_bytes_prefix_transitions']} / {r['transitions']}",
                f"{r['tokens']['read_total'] / max(1, r['tokens']['input_total']) * 100:.1f} %",
                ", ".join(r["first_differences"]) or "-",
            ]
        )
    header = [
        "api",
        "served from cache, steps >= 3 (min / median)",
        "steps >= 3 at >= 90 %",
        "most possible, steps >= 3 (min / median)",
        "previous request served again (min / median)",
        "prompt prefix identical",
        "body bytes prefix",
        "all input from cache",
        "first difference",
    ]
    return markdown_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--api", choices=["both", "openai", "anthropic"], default="both")
    parser.add_argument("--file-kb", type=float, default=1.5, help="size of each file read")
    parser.add_argument("--agents-kb", type=float, default=8.0, help="size of AGENTS.md")
    parser.add_argument(
        "--client-tools",
        default="edit_file,write_file,run_command",
        help="client tools declared (as the editors do), comma-separated",
    )
    parser.add_argument("--baseline-src", type=Path, help="also run this source tree's daemon")
    add_output_args(parser)
    args = parser.parse_args()
    if args.steps < 2 * args.prompts:
        parser.error("--steps must be at least twice --prompts")
    if args.baseline_src is not None and not (args.baseline_src / "agentd").is_dir():
        parser.error(f"--baseline-src: no agentd package in {args.baseline_src}")
    apis = ["openai", "anthropic"] if args.api == "both" else [args.api]

    async def all_runs() -> list[dict[str, Any]]:
        results = []
        for api in apis:
            for baseline in [None, args.baseline_src] if args.baseline_src else [None]:
                results.append(await run(api, args, baseline))
        return results

    results = asyncio.run(all_runs())
    out = {
        "config": {
            "steps": args.steps,
            "prompts": args.prompts,
            "file_kb": args.file_kb,
            "agents_kb": args.agents_kb,
            "client_tools": args.client_tools,
            "goal": f">= {GOAL:.0%} of input tokens from the cache from step {GOAL_FROM_STEP} on",
        },
        "results": results,
    }
    emit(args, out, table(results))


if __name__ == "__main__":
    main()
