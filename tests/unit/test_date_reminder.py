"""The date reminder on a prompt's user message (`turn._date_reminder`): added
when the history has not been told today's date, found again without walking
the history while the message holding it stays where it was, and re-added when
that message is gone or changed (compaction, reset, a restore) or a day passed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentd.agent import turn
from agentd.agent.session import AwaitClientResult, Session
from agentd.messages import Message, ReminderPart, TextPart


def _session() -> Session:
    return Session("s1", Path("/ws"), AwaitClientResult([]))


def _prompt(session: Session, text: str) -> list[ReminderPart]:
    """What `run_prompt` does with the reminder, then a model reply."""
    dated = turn._date_reminder(session)
    session.append(Message("user", [*dated, TextPart(text)]))
    turn._remember_date(session, dated)
    session.append(Message("assistant", [TextPart("ok")]))
    return dated


@pytest.fixture
def day(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    today = ["2026-12-01"]
    monkeypatch.setattr(turn, "_today", lambda: f"Today's date is {today[0]}.")
    return today


def test_today_is_read_again_once_the_local_day_ends_or_the_clock_goes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`_today` keeps the local day it read, and reads the clock's date again
    past that day's end and before its start (a clock set back)."""
    midnight = time.mktime((2026, 12, 2, 0, 0, 0, 0, 0, -1))
    now = [midnight - 1.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    monkeypatch.setattr(turn, "_day", (0.0, 0.0, ""))
    reads: list[float] = []
    localtime = time.localtime

    def counted(secs: float | None = None) -> time.struct_time:
        reads.append(now[0])
        return localtime(secs)

    monkeypatch.setattr(time, "localtime", counted)
    assert turn._today() == "Today's date is 2026-12-01."
    now[0] = midnight - 3600.0
    assert turn._today() == "Today's date is 2026-12-01."
    assert len(reads) == 1  # the same day: the kept text
    now[0] = midnight
    assert turn._today() == "Today's date is 2026-12-02."
    now[0] = midnight + 86_399.0
    assert turn._today() == "Today's date is 2026-12-02."
    assert len(reads) == 2
    now[0] = midnight - 1.0  # the clock set back
    assert turn._today() == "Today's date is 2026-12-01."
    assert len(reads) == 3


def test_the_date_is_told_once_a_day(day: list[str]) -> None:
    session = _session()
    assert [r.text for r in _prompt(session, "a")] == ["Today's date is 2026-12-01."]
    assert _prompt(session, "b") == []
    assert _prompt(session, "c") == []
    day[0] = "2026-12-02"
    assert [r.text for r in _prompt(session, "d")] == ["Today's date is 2026-12-02."]
    assert _prompt(session, "e") == []
    # Back to a date the history's newest reminder does not hold (a clock set back).
    day[0] = "2026-12-01"
    assert [r.text for r in _prompt(session, "f")] == ["Today's date is 2026-12-01."]


def test_a_kept_reminder_is_found_without_walking_the_history(day: list[str]) -> None:
    session = _session()
    _prompt(session, "a")

    class Untouchable(Message):
        # A message whose parts cannot be read: the walk would fail on it.
        def __getattribute__(self, name: str) -> object:
            raise AssertionError("the history was walked")

    for _ in range(50):
        session.history.append(Untouchable.__new__(Untouchable))
    assert turn._date_reminder(session) == []


def test_the_date_comes_back_when_its_message_is_replaced(day: list[str]) -> None:
    session = _session()
    _prompt(session, "a")
    _prompt(session, "b")
    # A compaction: the older messages replaced by a summary, in place.
    session.history[:] = [Message("user", [TextPart("summary")]), *session.history[2:]]
    assert [r.text for r in _prompt(session, "c")] == ["Today's date is 2026-12-01."]
    assert _prompt(session, "d") == []


def test_the_date_comes_back_when_its_message_moves_or_loses_it(day: list[str]) -> None:
    session = _session()
    _prompt(session, "a")
    # The same message object at another index (messages before it removed
    # and others added): found by walking again, and still counted as told.
    session.history[:] = [Message("user", [TextPart("x")]), *session.history]
    assert _prompt(session, "b") == []
    # The reminder taken out of its message in place.
    first = session.history[1]
    first.parts[:] = [p for p in first.parts if not isinstance(p, ReminderPart)]
    assert [r.text for r in _prompt(session, "c")] == ["Today's date is 2026-12-01."]


def test_the_date_comes_back_after_a_reset_or_a_restore(day: list[str]) -> None:
    session = _session()
    _prompt(session, "a")
    session.history.clear()
    assert [r.text for r in _prompt(session, "b")] == ["Today's date is 2026-12-01."]
    # A restored history: other objects, with or without the date.
    session.history = [Message("user", [TextPart("old")])]
    assert [r.text for r in _prompt(session, "c")] == ["Today's date is 2026-12-01."]
    session.history = [
        Message("user", [ReminderPart("Today's date is 2026-12-01.", "date"), TextPart("x")])
    ]
    assert _prompt(session, "d") == []
