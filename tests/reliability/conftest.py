"""Fixtures of the reliability tests that need more than `tests/conftest.py`'s."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A loopback port whose accept queue is full: SYNs are dropped, connects time out."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    fill = []
    for _ in range(8):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(srv.getsockname())
        except BlockingIOError:
            pass
        fill.append(s)
    host, port = srv.getsockname()
    yield f"http://{host}:{port}/v1"
    for s in fill:
        s.close()
    srv.close()
