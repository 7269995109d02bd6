"""Secrets never reach a memory file (or a log line).

Extraction reads transcripts, and transcripts carry whatever the user pasted
or a tool printed: API keys, tokens, private keys, `.env` files. Everything
that may end up in a memory file goes through `redact` first; the matched
values are replaced by `[REDACTED]` and only the *kinds* found are reported,
so callers can log "redacted 2 secrets (github_token)" without the value.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

# Order matters: the PEM block goes first (it may contain anything), the
# generic `KEY=value` rule last (it keeps the key name and redacts the value).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        # An unterminated block (a truncated paste) is redacted to the end.
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*\Z)"
        ),
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{16,}")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("slack_token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}")),
)

# `.env`-style assignments whose name looks secret: the value goes, the name stays.
_ASSIGNMENT = re.compile(
    r"(?i)\b((?:export\s+)?(?:[A-Za-z0-9]+[_.-])*"
    r"(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)"
    r"(?:[_.-][A-Za-z0-9]+)*\s*[=:]\s*)([\"']?)([^\s\"'`]{4,})\2"
)


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with every secret replaced by `[REDACTED]`, and the kinds found."""
    kinds: list[str] = []
    for kind, pattern in _PATTERNS:
        text, n = pattern.subn(REDACTED, text)
        if n:
            kinds.append(kind)

    def assignment(m: re.Match[str]) -> str:
        if m.group(3) == REDACTED:
            return m.group(0)
        kinds.append("env_assignment")
        return f"{m.group(1)}{m.group(2)}{REDACTED}{m.group(2)}"

    text = _ASSIGNMENT.sub(assignment, text)
    return text, sorted(set(kinds))


def contains_secret(text: str) -> bool:
    return bool(redact(text)[1])
