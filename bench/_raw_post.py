"""The floor of a model request's transfer: a minimal client (one socket,
TCP_NODELAY, the head and the body each written with one `sendall`) posting
a given body to the bundled model server, as `history_bench.py` measures
agentd: from before the first write to the server's `arrivedTs` and
`completeTs`.

    python bench/_raw_post.py PORT PATH BODY_FILE RUNS

Prints a JSON list of the time.time() before each request's first write;
each response is read to its end before the next request.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path


def main() -> int:
    port, path, body_file, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    body = Path(body_file).read_bytes()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        "content-type: application/json\r\nanthropic-version: 2023-06-01\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    starts: list[float] = []
    for _ in range(runs):
        starts.append(time.time())
        sock.sendall(head)
        sock.sendall(body)
        seen = b""
        while not seen.endswith(b"0\r\n\r\n"):  # the chunked body's end
            data = sock.recv(65536)
            if not data:
                raise SystemExit("the model server closed the connection")
            seen = seen[-16:] + data
    sock.close()
    print(json.dumps(starts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
