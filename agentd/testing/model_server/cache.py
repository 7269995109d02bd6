"""Prompt caching, emulated: what each API would have served from its cache.

Both APIs cache a request's prefix and bill the part they found at a lower
rate; a client earns that only if its requests repeat their prefixes byte
for byte. The emulation keys the cache on the request's content exactly as
sent (a hash chain over its segments in the order the API reads them), so a
client that changes one byte early in its request sees the miss it would
see with the real API.

OpenAI (automatic): the prompt is the tools, then the messages. A request
reads the longest prefix, at a segment boundary, of any earlier request of
the same model, counted in 128-token steps from 1,024 tokens up; every
boundary of the request is then stored. Nothing is reported as written.

Anthropic (explicit): the prompt is the tools, the system blocks, then the
messages' content blocks; `cache_control` marks breakpoints (at most four,
else the API answers 400). At each breakpoint the API looks for a stored
prefix ending there or up to 20 blocks before it; the longest found is read.
The prefix at every breakpoint is stored; what lies between the read prefix
and the last breakpoint is reported as written, the rest as plain input.

Tokens are estimated as characters / 4 of each segment's JSON (the server's
estimate everywhere), an image's base64 counted as its API bills the image
(`images`), a prefix's count from its cumulative characters.
Entries live `ttl` seconds from their last use (five minutes, the APIs'
default), and prefixes under `min_tokens` are not cached (1,024, the
minimum of most models of both APIs).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentd.testing.model_server.images import image_chars

MIN_TOKENS = 1024
TTL = 300.0
OPENAI_STEP = 128
LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
MAX_ENTRIES = 200_000


class TooManyBreakpoints(ValueError):
    """More `cache_control` blocks than the Anthropic API allows."""


@dataclass(slots=True, frozen=True)
class CacheUse:
    """A request's input tokens and the cache's part in them."""

    total: int
    read: int = 0
    write: int = 0


def _segment(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=False)


def _without_cache_control(block: Any) -> tuple[Any, bool]:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}, True
    return block, False


class PromptCache:
    def __init__(
        self,
        *,
        min_tokens: int = MIN_TOKENS,
        ttl: float = TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = True
        self.min_tokens = min_tokens
        self.ttl = ttl
        self._clock = clock
        # (model, prefix hash) -> expiry, oldest use first.
        self._entries: OrderedDict[tuple[str, bytes], float] = OrderedDict()

    def configure(
        self,
        *,
        enabled: bool | None = None,
        min_tokens: int | None = None,
        ttl: float | None = None,
    ) -> None:
        if enabled is not None:
            self.enabled = enabled
        if min_tokens is not None:
            self.min_tokens = min_tokens
        if ttl is not None:
            self.ttl = ttl

    def clear(self) -> None:
        self._entries.clear()

    # --- the two APIs ------------------------------------------------------------------

    def openai(self, body: dict[str, Any]) -> CacheUse:
        segments: list[str] = []
        extra: list[int] = []  # characters each segment's images add (`images`)
        tools = body.get("tools")
        if tools:
            segments.append(_segment(tools))
            extra.append(0)
        for message in body.get("messages") or ():
            segments.append(_segment(message))
            extra.append(image_chars(message, "openai", segments[-1]))
        model = str(body.get("model", ""))
        chain, chars = _chain(segments, extra)
        total = max(1, chars[-1] // 4)
        if not self.enabled:
            return CacheUse(total)
        now = self._clock()
        read = 0
        for i in range(len(chain) - 1, 0, -1):
            if self._hit(model, chain[i], now):
                read = (chars[i] // 4) // OPENAI_STEP * OPENAI_STEP
                break
        for i in range(1, len(chain)):
            if chars[i] // 4 >= self.min_tokens:
                self._store(model, chain[i], now)
        return CacheUse(total, read if read >= self.min_tokens else 0)

    def anthropic(self, body: dict[str, Any]) -> CacheUse:
        """Raises TooManyBreakpoints as the API refuses more than four."""
        segments: list[str] = []
        extra: list[int] = []  # characters each segment's images add (`images`)
        marks: list[int] = []  # prefix lengths (in segments) ending at a breakpoint

        def add(obj: Any, role: Any = None) -> None:
            plain, marked = _without_cache_control(obj)
            if role is not None and isinstance(plain, dict):
                plain = {"role": role, **plain}  # the same block from the other side differs
            segments.append(_segment(plain))
            extra.append(image_chars(plain, "anthropic", segments[-1]))
            if marked:
                marks.append(len(segments))

        for tool in body.get("tools") or ():
            add(tool)
        system = body.get("system")
        if isinstance(system, str) and system:
            add({"type": "text", "text": system})
        elif isinstance(system, list):
            for block in system:
                add(block)
        for msg in body.get("messages") or ():
            if not isinstance(msg, dict):
                continue
            content = msg.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for block in blocks or ():
                add(block, msg.get("role"))
        if len(marks) > MAX_BREAKPOINTS:
            raise TooManyBreakpoints(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(marks)}."
            )
        model = str(body.get("model", ""))
        chain, chars = _chain(segments, extra)
        total = max(1, chars[-1] // 4)
        if not self.enabled or not marks:
            return CacheUse(total)
        now = self._clock()
        read_at = 0
        for mark in marks:
            for j in range(mark, max(0, mark - LOOKBACK_BLOCKS) - 1, -1):
                if j > read_at and self._hit(model, chain[j], now):
                    read_at = j
                    break
        last = max(marks)
        for mark in marks:
            if chars[mark] // 4 >= self.min_tokens:
                self._store(model, chain[mark], now)
        read = chars[read_at] // 4 if read_at else 0
        written = chars[last] // 4 if chars[last] // 4 >= self.min_tokens else read
        write = max(0, written - read)
        return CacheUse(total, read, write)

    # --- the store ---------------------------------------------------------------------

    def _hit(self, model: str, key: bytes, now: float) -> bool:
        expiry = self._entries.get((model, key))
        if expiry is None:
            return False
        if expiry < now:
            del self._entries[(model, key)]
            return False
        self._entries[(model, key)] = now + self.ttl  # a hit refreshes the entry
        self._entries.move_to_end((model, key))
        return True

    def _store(self, model: str, key: bytes, now: float) -> None:
        self._entries[(model, key)] = now + self.ttl
        self._entries.move_to_end((model, key))
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)


def _chain(segments: list[str], extra: list[int]) -> tuple[list[bytes], list[int]]:
    """Hashes and cumulative characters of each prefix (`extra` added to
    each segment's length): index i covers segments[:i]."""
    chain = [b""]
    chars = [0]
    for seg, more in zip(segments, extra, strict=True):
        chain.append(hashlib.sha256(chain[-1] + seg.encode()).digest())
        chars.append(chars[-1] + len(seg) + more)
    return chain, chars
