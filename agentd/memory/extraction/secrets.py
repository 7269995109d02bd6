"""Secrets never reach a memory file, an extraction request or a log line.

Extraction reads transcripts, and transcripts carry whatever the user pasted
or a tool printed: API keys, tokens, private keys, `.env` files, connection
strings. Everything that goes into an extraction request, or may end up in a
memory file, goes through `redact` first; each secret found is replaced by
`[REDACTED]` and only the *kinds* found are reported, so callers can log
"redacted 2 secrets (github_token)" without the value.

The rules, in three layers:

1. The plugins of `detect-secrets` (Yelp's maintained rule set, Apache-2.0):
   AWS keys, Azure storage keys, credentials in URLs (`scheme://user:pass@`),
   GitHub, GitLab, npm, PyPI, OpenAI, Slack, Stripe, SendGrid, Twilio,
   Discord, Telegram, Mailchimp, Square, IBM, Artifactory, Cloudant tokens,
   JWTs, secret-sounding keywords with a quoted value (`{"password": "..."}`,
   `api_key = "..."`) and high-entropy quoted strings. It is imported only by
   extraction, in a worker thread, when a project's extraction starts (its
   import costs ~0.3 s and 6.5 MiB: it pulls in `requests` for its optional
   verifiers, which agentd never calls).
2. What that set lacks, as patterns here: Google API keys (`AIza...`, after
   the gitleaks rule `gcp-api-key`, MIT), `sk-` keys of any vendor (OpenAI's
   plugin only knows its legacy shape), and PEM private keys as whole blocks
   (the plugin flags the header line only), an unterminated block too.
3. Entropy, for keys no rule names: a long token of high entropy right after
   a key-like word (`token`, `secret`, `password`, `key`, ...), and a bare
   token of 32+ characters that looks like random base64 (a 40-character AWS
   secret access key with nothing around it), plus `.env` assignments whose
   name is secret-sounding (`DB_PASSWORD=...`, the name stays).

A match is widened to the whole token it sits in, so a rule that knows only
a key's first 24 characters still removes all of it.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

REDACTED = "[REDACTED]"

# Characters a key is made of: a match is widened over them on both sides.
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=")

_PEM = re.compile(
    # An unterminated block (a truncated paste) is redacted to the end.
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*\Z)"
)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # gitleaks `gcp-api-key`.
    ("google_api_key", re.compile(r"\bAIza[\w-]{35}(?![\w-])")),
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

# The assignment rule backtracks at every word: tried only where it can match.
_ASSIGNMENT_HINT = re.compile(
    r"(?i)secret|token|passw|api_?key|access_?key|private_?key|credential"
)
PIECE_CHARS = 2048

# Entropy rules: a token, a key-like word shortly before it.
_TOKEN = re.compile(r"(?<![\w+/=-])[\w+/=-]{12,}(?![\w+/=-])")
_KEY_WORD = re.compile(
    r"(?i)(?:key|secret|token|passw(?:or)?d|pwd|credential|auth|bearer|api|private)"
    r"[\w-]*\W{1,12}(?:(?:is|was|=|:|to|of)\W{1,3})?$"
)
_NEAR_ENTROPY = 3.2
_BARE_MIN_CHARS = 32
_BARE_ENTROPY = 4.4
_BARE_TRANSITIONS = 0.3

_lock = threading.Lock()
# (kind, finder): a finder yields the (start, end) of each secret in a text.
Finder = Callable[[str], Iterable[tuple[int, int]]]
_finders: list[tuple[str, Finder]] | None = None


def _kind(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")


def _regex_finder(patterns: Iterable[re.Pattern[str]]) -> Finder:
    """Where a detector's own patterns match: the span of each capture group
    (the secret, or the prefix it starts with: widening takes the rest), or of
    the whole match. One pass per pattern over the text, at C speed."""
    compiled = list(patterns)

    def find(text: str) -> Iterable[tuple[int, int]]:
        for pattern in compiled:
            for m in pattern.finditer(text):
                groups = [i for i in range(1, pattern.groups + 1) if m.group(i)]
                if groups:
                    yield from (m.span(i) for i in groups)
                else:
                    yield m.span()

    return find


def _load_finders() -> list[tuple[str, Finder]]:
    """detect-secrets' detectors, built once (the import is deferred to here)."""
    global _finders
    with _lock:
        if _finders is None:
            _finders = _build_finders()
        return _finders


def _build_finders() -> list[tuple[str, Finder]]:
    from detect_secrets.plugins import (
        artifactory,
        aws,
        azure_storage_key,
        basic_auth,
        cloudant,
        discord,
        github_token,
        gitlab_token,
        high_entropy_strings,
        ibm_cloud_iam,
        ibm_cos_hmac,
        jwt,
        keyword,
        mailchimp,
        npm,
        openai,
        private_key,
        pypi_token,
        sendgrid,
        slack,
        softlayer,
        square_oauth,
        stripe,
        telegram_token,
        twilio,
    )

    # Public IP addresses (ip_public) are no secret, and quoted hex strings
    # are mostly commit and content hashes: left out.
    detectors: list[Any] = [
        artifactory.ArtifactoryDetector(),
        aws.AWSKeyDetector(),
        azure_storage_key.AzureStorageKeyDetector(),
        basic_auth.BasicAuthDetector(),
        cloudant.CloudantDetector(),
        discord.DiscordBotTokenDetector(),
        github_token.GitHubTokenDetector(),
        gitlab_token.GitLabTokenDetector(),
        ibm_cloud_iam.IbmCloudIamDetector(),
        ibm_cos_hmac.IbmCosHmacDetector(),
        mailchimp.MailchimpDetector(),
        npm.NpmDetector(),
        openai.OpenAIDetector(),
        private_key.PrivateKeyDetector(),
        pypi_token.PypiTokenDetector(),
        sendgrid.SendGridDetector(),
        slack.SlackDetector(),
        softlayer.SoftlayerDetector(),
        square_oauth.SquareOAuthDetector(),
        stripe.StripeDetector(),
        telegram_token.TelegramBotTokenDetector(),
        twilio.TwilioKeyDetector(),
    ]
    finders = [(_kind(d.secret_type), _regex_finder(d.denylist)) for d in detectors]

    token = jwt.JwtTokenDetector()

    def jwts(text: str) -> Iterable[tuple[int, int]]:
        for pattern in token.denylist:
            for m in pattern.finditer(text):
                if token.is_formally_valid(m.group()):
                    yield m.span()

    finders.append((_kind(token.secret_type), jwts))

    words = keyword.KeywordDetector()
    has_keyword = re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)
    config = keyword.CONFIG_DENYLIST_REGEX_TO_GROUP

    def keywords(text: str) -> Iterable[tuple[int, int]]:
        # Its rules look at one line at a time, and only at lines naming a
        # secret-sounding keyword: quoted values (JSON, code), then `key: value`.
        offset = 0
        for line in text.split("\n"):
            if has_keyword.search(line):
                for rules in (None, config):
                    for value in words.analyze_string(line, rules):
                        at = line.find(value) if value.strip() else -1
                        if at >= 0 and value.strip() not in REDACTED:
                            yield offset + at, offset + at + len(value)
            offset += len(line) + 1

    finders.append(("secret_keyword", keywords))

    b64 = high_entropy_strings.Base64HighEntropyString()

    def quoted(text: str) -> Iterable[tuple[int, int]]:
        for m in b64.regex.finditer(text):
            if b64.calculate_shannon_entropy(m.group(2)) > b64.entropy_limit:
                yield m.span(2)

    finders.append((_kind(b64.secret_type), quoted))
    return finders


def _entropy(token: str) -> float:
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in Counter(token).values())


def _classes(token: str) -> tuple[bool, bool, bool]:
    return (
        any(c.isupper() for c in token),
        any(c.islower() for c in token),
        any(c.isdigit() for c in token),
    )


def _looks_random(token: str) -> bool:
    """A bare token shaped like random base64: mixed classes, often switching."""
    if len(token) < _BARE_MIN_CHARS or token.startswith(("/", "-")):
        return False
    upper, lower, digit = _classes(token)
    if not (upper and lower and digit) or _entropy(token) < _BARE_ENTROPY:
        return False

    def cls(c: str) -> int:
        return 0 if c.isupper() else 1 if c.islower() else 2 if c.isdigit() else 3

    switches = sum(cls(a) != cls(b) for a, b in itertools.pairwise(token))
    return switches / len(token) >= _BARE_TRANSITIONS


def _near_a_key_word(text: str, start: int, token: str) -> bool:
    """A token of some entropy right after `token`, `password is`, `api key:`..."""
    upper, lower, digit = _classes(token)
    if not (digit or (upper and lower)) or _entropy(token) < _NEAR_ENTROPY:
        return False
    line_start = text.rfind("\n", 0, start) + 1
    before = text[max(line_start, start - 40) : start]
    return _KEY_WORD.search(before) is not None


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    while start > 0 and text[start - 1] in _TOKEN_CHARS:
        start -= 1
    while end < len(text) and text[end] in _TOKEN_CHARS:
        end += 1
    return start, end


def _pieces(text: str) -> Iterable[tuple[int, str]]:
    """`text` in pieces of about `PIECE_CHARS`, cut after a newline, with their offsets.

    The rules match within a line; a piece at a time keeps each regex call
    short, so this thread hands the GIL back to the event loop often.
    """
    at = 0
    while at < len(text):
        end = text.find("\n", at + PIECE_CHARS)
        end = len(text) if end < 0 else end + 1
        yield at, text[at:end]
        at = end


def _spans(text: str, kinds: set[str]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []

    def add(kind: str, start: int, end: int, widen: bool = True) -> None:
        spans.append(_widen(text, start, end) if widen else (start, end))
        kinds.add(kind)

    finders = _load_finders()
    for base, piece in _pieces(text):
        for kind, pattern in _PATTERNS:
            for m in pattern.finditer(piece):
                add(kind, base + m.start(), base + m.end())
        for kind, find in finders:
            for start, end in find(piece):
                if end > start and REDACTED not in piece[start:end]:
                    add(kind, base + start, base + end)
        for m in _TOKEN.finditer(piece):
            token = m.group()
            if _looks_random(token):
                add("high_entropy_token", base + m.start(), base + m.end(), widen=False)
            elif _near_a_key_word(piece, m.start(), token):
                add("key_like_value", base + m.start(), base + m.end(), widen=False)
    return spans


def _apply(text: str, spans: list[tuple[int, int]]) -> str:
    out: list[str] = []
    at = 0
    for start, end in sorted(spans):
        if end <= at:
            continue
        start = max(start, at)
        out.append(text[at:start])
        out.append(REDACTED)
        at = end
    out.append(text[at:])
    return "".join(out)


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with every secret replaced by `[REDACTED]`, and the kinds found.

    Blocking, and the first call imports the rule set: call it in a thread.
    """
    kinds: set[str] = set()
    text, n = _PEM.subn(REDACTED, text)
    if n:
        kinds.add("private_key")
    spans = _spans(text, kinds)
    if spans:
        text = _apply(text, spans)

    def assignment(m: re.Match[str]) -> str:
        if REDACTED in m.group(3):
            return m.group(0)
        kinds.add("env_assignment")
        return f"{m.group(1)}{m.group(2)}{REDACTED}{m.group(2)}"

    if _ASSIGNMENT_HINT.search(text):
        text = _ASSIGNMENT.sub(assignment, text)
    return text, sorted(kinds)


def contains_secret(text: str) -> bool:
    return bool(redact(text)[1])
