"""ACP next edit suggestions: `nes/suggest` -> the model request, and -> the reply.

A fresh ACP daemon per run (`python -P -m agentd.acp`, driven by the raw
client of `agentd.testing`: no client library on the measured path) is
initialized, starts an NES session and opens a 300-line document; then
`--suggests` times (default 10) the editor types a character (a ranged
`document/didChange`) and asks `nes/suggest` at the cursor, which the
bundled model server answers with the region rewritten (one edit). Per
suggest:

- suggest -> model request   from writing the request to the model server's
                              log `ts` of the request's arrival (wall clock)
- suggest -> reply           from writing the request to reading its reply
                              (the edit computed, positions in UTF-16)

The first suggest of each daemon is reported apart (it imports the
prediction's modules). Medians and p90 over every run's suggests are
printed as JSON, then as a table. agentd's `main` answers `nes/suggest`
"method not found", so there is no baseline to run beside it: say the load
average with the figures.

    .venv/bin/python bench/nes_bench.py --runs 5 --suggests 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_output_args, emit, markdown_table, summary
from acp_bench import reply, spawn, stop

from agentd.nes.predict import END, START
from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer

LINES = 300
CURSOR_LINE = 150


def document() -> str:
    return "".join(f"def f{n}(x):\n    return x + {n}\n" for n in range(LINES // 2))


async def one_run(model: ModelServer, workspace: Path, home: Path, suggests: int) -> dict[str, Any]:
    env = daemon_env(model.openai_base_url, home, AGENTD_LOG_LEVEL="warning")
    daemon = await spawn(env, True, None)
    out: dict[str, list[float]] = {"first": [], "to_request": [], "to_reply": []}
    try:
        daemon.request(0, "initialize", {"protocolVersion": 1})
        await reply(daemon, 0)
        daemon.request(1, "nes/start", {"workspaceUri": workspace.as_uri()})
        sid = (await reply(daemon, 1))["result"]["sessionId"]
        uri = (workspace / "mod.py").as_uri()
        text = document()
        opened = {"sessionId": sid, "uri": uri, "languageId": "python", "version": 1}
        daemon.notify("document/didOpen", {**opened, "text": text})
        lines = text.splitlines(keepends=True)
        for n in range(suggests):
            version = n + 2
            # The editor types one character at the start of the cursor's line.
            at = {"line": CURSOR_LINE, "character": 0}
            change = {"range": {"start": at, "end": at}, "text": "#"}
            daemon.notify(
                "document/didChange",
                {"sessionId": sid, "uri": uri, "version": version, "contentChanges": [change]},
            )
            lines[CURSOR_LINE] = "#" + lines[CURSOR_LINE]
            region = "".join(lines[CURSOR_LINE - 5 : CURSOR_LINE + 6])
            rewritten = f"{START}\n{region.replace('#', '# ')}{END}"
            # One chunk: the time is agentd's, not the stream's length.
            model.enqueue({"chunks": [rewritten]}, "nes")
            last = max((e["id"] for e in model.requests()), default=-1)
            params = {
                "sessionId": sid,
                "uri": uri,
                "version": version,
                "position": {"line": CURSOR_LINE, "character": 1},
                "triggerKind": "automatic",
            }
            msg_id = 10 + n
            sent_at, start = time.time(), time.perf_counter()
            daemon.request(msg_id, "nes/suggest", params)
            answer = await reply(daemon, msg_id)
            done = time.perf_counter()
            request = await model.wait_for(
                lambda e, last=last: (
                    e["type"] == "request" and e["purpose"] == "nes" and e["id"] > last
                )
            )
            if not answer["result"]["suggestions"]:
                raise RuntimeError(f"no suggestion: {answer}")
            to_request = (request["ts"] - sent_at) * 1000
            to_reply = (done - start) * 1000
            if n == 0:
                out["first"].append(to_reply)
            else:
                out["to_request"].append(to_request)
                out["to_reply"].append(to_reply)
    finally:
        await stop(daemon)
    return out


async def main(runs: int, suggests: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"first": [], "to_request": [], "to_reply": []}
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="agentd-nes-bench-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        async with ModelServer() as model:
            for run in range(runs):
                home = Path(tmp) / f"home{run}"
                for key, values in (await one_run(model, workspace, home, suggests)).items():
                    samples[key] += values
    return {
        "runs": runs,
        "suggests_per_run": suggests,
        "python": sys.version.split()[0],
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "first_suggest_to_reply_ms": summary(samples["first"]),
        "suggest_to_model_request_ms": summary(samples["to_request"]),
        "suggest_to_reply_ms": summary(samples["to_reply"]),
    }


def table(result: dict[str, Any]) -> str:
    rows = []
    for key in ("suggest_to_model_request_ms", "suggest_to_reply_ms", "first_suggest_to_reply_ms"):
        s = result[key]
        rows.append([key, str(s.get("n")), str(s.get("median")), str(s.get("p90"))])
    load = f"load average {result['loadavg_before']} -> {result['loadavg_after']}"
    return markdown_table(["metric", "n", "median", "p90"], rows) + f"\n\n{load}"


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--suggests", type=int, default=10)
    add_output_args(parser)
    args = parser.parse_args()
    result = asyncio.run(main(args.runs, args.suggests))
    emit(args, result, table(result))


if __name__ == "__main__":
    cli()
