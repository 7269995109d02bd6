"""Secrets never reach memory, the extraction request or the log (issue 14, item 2).

The hand-grown rules caught `sk-`, `ghp_`, `AKIA`, PEM and `KEY=value`, but a
Stripe `sk_live_` key, a Google `AIza` key, a GitLab `glpat-` token, a bare
40-character AWS secret access key, `{"password": "..."}` in JSON and
credentials in a URL were written verbatim into a note and sent in the
extraction request. The rule set is now detect-secrets' plugins plus entropy
rules: the real daemon and model server, each of those pasted by the user
and copied by the model into a note, is in neither the note, nor the
extraction request, nor the log. Transcripts keep them (the decision is in
the README's privacy section): verbatim, readable by the user only.
"""

from __future__ import annotations

import asyncio
import random
import string
from pathlib import Path
from typing import Any

import pytest

from agentd.memory.extraction.secrets import REDACTED, redact
from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon
from agentd.transcript import sessions_dir

_rng = random.Random(14)
_ALNUM = string.ascii_letters + string.digits


def _random(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


STRIPE = "sk_live_" + _random(_ALNUM, 32)
GOOGLE = "AIza" + _random(_ALNUM + "-_", 35)
GITLAB = "glpat-" + _random(_ALNUM + "-_", 20)
AWS_SECRET = _random(_ALNUM + "+/", 40)
PASSWORD = "correct-horse-battery-42"
DB_PASSWORD = "Sup3rS3cretPw"

# (what the user pastes, the secret value in it)
ISSUE_EXAMPLES = [
    (f"Stripe key {STRIPE}", STRIPE),
    (f"Google key {GOOGLE}", GOOGLE),
    (f"GitLab token {GITLAB}", GITLAB),
    (AWS_SECRET, AWS_SECRET),
    (f'config.json has {{"user": "ci", "password": "{PASSWORD}"}}', PASSWORD),
    (f"DATABASE_URL postgres://app:{DB_PASSWORD}@db.internal:5432/prod", DB_PASSWORD),
]
# Prose, identifiers, hashes and paths that are no secrets.
NOT_SECRETS = [
    "the tokenizer = fast; see docs at https://example.com/a-b",
    "commit e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 fixed it",
    "ThisIsAVeryLongCamelCaseIdentifierName1 is the class to use",
    "see /Users/Alice/Projects/MyApp/src/components/Button.tsx",
    "The API key lives in 1Password under 'staging'.",
    "Deploy with `make release VERSION=2024.06.1` after the tests pass.",
    "postgres://db.internal:5432/prod has no password in the URL",
]


@pytest.mark.parametrize("text,secret", ISSUE_EXAMPLES, ids=[s[:12] for _, s in ISSUE_EXAMPLES])
def test_each_example_of_the_issue_is_redacted(text: str, secret: str) -> None:
    redacted, kinds = redact(text)
    assert secret not in redacted and REDACTED in redacted and kinds, redacted


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_prose_and_hashes_are_left_alone(text: str) -> None:
    assert redact(text) == (text, [])


@pytest.mark.e2e
async def test_secrets_reach_neither_memory_nor_the_extraction_request_nor_the_log(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    folder = memory_folder(workspace, tmp_path)
    pasted = "\n".join(text for text, _ in ISSUE_EXAMPLES)
    body = "Staging access, as the user gave it:\n" + pasted
    op: dict[str, Any] = {
        "action": "create",
        "file": "staging.md",
        "name": "staging access",
        "description": f"keys for staging ({STRIPE})",
        "type": "reference",
        "body": body,
    }
    model_server.enqueue(
        {"toolCalls": [{"name": "save_memories", "arguments": {"operations": [op]}}]},
        purpose="extract",
    )
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_LOG_LEVEL="debug")
    d = await RawDaemon.spawn(env, stderr=asyncio.subprocess.PIPE)
    try:
        await d.initialize({"memory": {"modelTier": False}})
        d.request(1, "agent/newSession", {"workspaceRoot": str(workspace)})
        sid = (await d.response(1))["result"]["sessionId"]
        d.request(2, "agent/prompt", {"sessionId": sid, "prompt": "for staging:\n" + pasted})
        assert (await d.response(2))["result"]["stopReason"] == "end_turn"
        # Wait for the note (its memory/changed), then stop the daemon for its log.
        while True:
            msg = await d.read_message(30)
            paths = msg.get("params", {}).get("paths", []) if "method" in msg else []
            if msg.get("method") == "memory/changed" and any(
                Path(p).name == "staging.md" for p in paths
            ):
                break
        d.request(3, "shutdown")
        await d.response(3)
        d.notify("exit")
        assert await d.wait_exit() == 0
        assert d.proc.stderr is not None
        log = (await d.proc.stderr.read()).decode()
    finally:
        await d.close()
    note = (folder / "staging.md").read_text()
    assert REDACTED in note
    request = str(model_server.requests("extract")[0]["body"])
    assert "for staging" in request
    for _, secret in ISSUE_EXAMPLES:
        assert secret not in note, secret
        assert secret not in request, secret
        assert secret not in log, secret
    # The transcript keeps the conversation verbatim, for the user's eyes only.
    transcript = sessions_dir(workspace, agentd_home(tmp_path)) / f"{sid}.jsonl"
    assert STRIPE in transcript.read_text()
    assert transcript.stat().st_mode & 0o077 == 0
