"""An incremental Server-Sent Events decoder (the WHATWG parsing rules).

Bytes go in as they arrive from the network, complete events come out. It is
our own rather than httpx-sse's so that the edge cases a model server can
produce are decided here, with tests: comments, CR / LF / CRLF line endings
(a CRLF may be split across two reads), events split across reads, a UTF-8
character split across reads, and very long lines (kept as a list of pieces,
so a line that arrives in many reads costs linear time, with a cap so a broken
server cannot exhaust memory).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_EOL = re.compile(r"\r\n|\r|\n")
MAX_LINE = 16 * 1024 * 1024  # characters; far above any real chunk


class SSEError(ValueError):
    """The byte stream is not a usable event stream."""


@dataclass(slots=True)
class SSEEvent:
    event: str
    data: str
    id: str = ""


class SSEDecoder:
    def __init__(self, max_line: int = MAX_LINE) -> None:
        # "replace" rather than "strict": one bad byte in a text delta should
        # not end a turn; JSON decoding downstream still catches real garbage.
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._max_line = max_line
        self._pieces: list[str] = []
        self._pending = 0  # length of the unterminated line held in _pieces
        self._skip_lf = False  # the last read ended in CR; a leading LF is its pair
        self._at_start = True
        self._event = ""
        self._data: list[str] = []
        self._id = ""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return self._feed_text(self._utf8.decode(chunk))

    def close(self) -> list[SSEEvent]:
        """End of stream: flush what is complete.

        An unterminated last line is dropped: it is most likely cut off, and
        acting on half a JSON object would be worse than reporting the cut.
        Complete data lines that lack only the final blank line are still
        dispatched, since some servers end the stream that way.
        """
        events = self._feed_text(self._utf8.decode(b"", final=True))
        self._pieces.clear()
        self._pending = 0
        if self._data:
            events.append(self._dispatch())
        return events

    def _feed_text(self, text: str) -> list[SSEEvent]:
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            text = text.removeprefix("\ufeff")
        if self._skip_lf:
            self._skip_lf = False
            text = text.removeprefix("\n")
        events: list[SSEEvent] = []
        pos = 0
        for match in _EOL.finditer(text):
            piece = text[pos : match.start()]
            if self._pieces:
                self._pieces.append(piece)
                piece = "".join(self._pieces)
                self._pieces.clear()
                self._pending = 0
            pos = match.end()
            event = self._line(piece)
            if event is not None:
                events.append(event)
        if pos == len(text) and text.endswith("\r"):
            self._skip_lf = True
        rest = text[pos:]
        if rest:
            self._pending += len(rest)
            if self._pending > self._max_line:
                raise SSEError(f"a line of the event stream exceeds {self._max_line} characters")
            self._pieces.append(rest)
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            if self._data:
                return self._dispatch()
            self._event = ""  # a blank line without data dispatches nothing
            return None
        if line.startswith(":"):
            return None  # a comment, e.g. a keep-alive
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        # "retry" and unknown fields are ignored: a model stream is never resumed.
        return None

    def _dispatch(self) -> SSEEvent:
        event = SSEEvent(self._event or "message", "\n".join(self._data), self._id)
        self._event = ""
        self._data = []
        return event
