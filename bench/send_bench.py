"""httpx's send -> the request's first socket write, in process, over one
kept-alive loopback connection: httpx's stock transport (httpcore's pool
over anyio), httpcore's pool on agentd's network backend, and the model
client's (`agentd.providers.network.model_transport`: `ModelPool`,
httpcore's HTTP/1.1 connections on that backend), interleaved; and the
`httpx.Request` itself, `client.build_request` beside `ModelHTTP._request`.

    python bench/send_bench.py [--runs 200] [--idle 0.05]

`--idle`: seconds asleep before each request (after an idle spell a request
costs more: cold caches; the daemon's prompts come after one). The clock
starts when `send` is called and stops at the first `socket.send` (the
request's head). Medians and p10 in ms; the request objects in us.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import httpcore
import httpx

from agentd.providers.config import ProviderConfig
from agentd.providers.http import ModelHTTP, _tls_context
from agentd.providers.network import AsyncioBackend, model_transport

BODY = b'{"model":"m","messages":[' + b'{"role":"user","content":"hi"},' * 100 + b"{}]}"
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 12\r\n\r\n"
    b"data: hi\r\n\r\n"
)
LIMITS = httpx.Limits(max_connections=32, max_keepalive_connections=8, keepalive_expiry=30.0)

first_write: list[float] = []
_send = socket.socket.send


def _marked_send(self: socket.socket, data: Any, *args: Any) -> int:
    if not first_write:
        first_write.append(time.perf_counter())
    return _send(self, data, *args)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":", 1)[1]))
            writer.write(ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        writer.close()


def _stats(values: list[float]) -> str:
    values = sorted(values)
    return f"{statistics.median(values):.3f} (p10 {values[len(values) // 10]:.3f})"


def _httpcore_pool(verify: ssl.SSLContext | bool) -> httpx.AsyncHTTPTransport:
    """httpx's transport with httpcore's own pool on agentd's backend (the
    model client's before `ModelPool`)."""
    context = httpx.create_ssl_context(verify=verify, trust_env=True)
    transport = httpx.AsyncHTTPTransport(verify=context, limits=LIMITS)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=LIMITS.max_connections,
        max_keepalive_connections=LIMITS.max_keepalive_connections,
        keepalive_expiry=LIMITS.keepalive_expiry,
        network_backend=AsyncioBackend(),
    )
    return transport


async def bench_send(runs: int, idle: float) -> dict[str, list[float]]:
    server = await asyncio.start_server(_answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    verify = _tls_context(url)
    clients = {
        "httpx stock transport": httpx.AsyncClient(verify=verify, limits=LIMITS),
        "httpcore's pool on AsyncioBackend": httpx.AsyncClient(transport=_httpcore_pool(verify)),
        "model_transport": httpx.AsyncClient(transport=model_transport(verify, LIMITS)),
    }
    samples: dict[str, list[float]] = {name: [] for name in clients}
    socket.socket.send = _marked_send
    try:
        for i in range(runs + 5):
            order = list(clients.items())
            for name, client in order if i % 2 else order[::-1]:
                await asyncio.sleep(idle)
                request = client.build_request("POST", url, content=BODY)
                first_write.clear()
                start = time.perf_counter()
                response = await client.send(request, stream=True)
                written = first_write[0]
                await response.aread()
                await response.aclose()
                if i >= 5:  # the first ones connect
                    samples[name].append((written - start) * 1000)
    finally:
        socket.socket.send = _send
        for client in clients.values():
            await client.aclose()
        server.close()
        await server.wait_closed()
    return samples


async def bench_request(runs: int, idle: float) -> dict[str, list[float]]:
    http = ModelHTTP(ProviderConfig(base_url="http://127.0.0.1:1/v1", api_key="sk-x", model="m"))
    client = http._get_client()
    url = "http://127.0.0.1:1/v1/chat/completions"
    headers = {
        "Authorization": "Bearer sk-x",
        "Accept": "text/event-stream",
        "Content-Type": "application/json",
        "X-Agentd-Purpose": "main",
    }
    makers: dict[str, Callable[[], httpx.Request]] = {
        "client.build_request": lambda: client.build_request(
            "POST", url, content=BODY, headers=headers, extensions={"trace": None}
        ),
        "ModelHTTP._request": lambda: http._request(client, url, BODY, headers, {"trace": None}),
    }
    samples: dict[str, list[float]] = {name: [] for name in makers}
    for i in range(runs):
        order = list(makers.items())
        for name, make in order if i % 2 else order[::-1]:
            await asyncio.sleep(idle)
            start = time.perf_counter()
            make()
            samples[name].append((time.perf_counter() - start) * 1e6)
    await http.aclose()
    return samples


async def bench_model_send(runs: int, idle: float) -> dict[str, list[float]]:
    """The model client's request, from the request object's making to the
    head's first socket write: `ModelHTTP._request` and `client.send` (the
    way through httpx's client and transport) beside `ModelHTTP._send` (the
    `httpcore.Request` handed to the `ModelPool` directly), one client."""
    server = await asyncio.start_server(_answer, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    url = f"{base}/chat/completions"
    http = ModelHTTP(ProviderConfig(base_url=base, api_key="sk-x", model="m"))
    client = http._get_client()
    headers = {
        "Authorization": "Bearer sk-x",
        "Accept": "text/event-stream",
        "Content-Type": "application/json",
        "X-Agentd-Purpose": "main",
    }

    async def through_client() -> httpx.Response:
        request = http._request(client, url, BODY, headers, {"trace": _trace})
        return await client.send(request, stream=True)

    async def direct() -> httpx.Response:
        return await http._send(client, url, BODY, headers, {"trace": _trace})

    ways: dict[str, Callable[[], Any]] = {
        "`_request` + `client.send`": through_client,
        "`ModelHTTP._send`": direct,
    }
    samples: dict[str, list[float]] = {name: [] for name in ways}
    socket.socket.send = _marked_send
    try:
        for i in range(runs + 5):
            order = list(ways.items())
            for name, way in order if i % 2 else order[::-1]:
                await asyncio.sleep(idle)
                first_write.clear()
                start = time.perf_counter()
                response = await way()
                written = first_write[0]
                await response.aread()
                await response.aclose()
                if i >= 5:
                    samples[name].append((written - start) * 1000)
    finally:
        socket.socket.send = _send
        await http.aclose()
        server.close()
        await server.wait_closed()
    return samples


async def _trace(event: str, info: Any) -> None:
    """A `trace` extension, as the daemon's requests carry one (`on_sent`)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--idle", type=float, default=0.05)
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    send = asyncio.run(bench_send(args.runs, args.idle))
    made = asyncio.run(bench_request(args.runs, args.idle))
    model = asyncio.run(bench_model_send(args.runs, args.idle))
    print(
        f"load average {load}; {args.runs} requests each, {args.idle * 1000:g} ms idle before each"
    )
    print("| measure | median (p10) |")
    print("| --- | --- |")
    for name, values in send.items():
        print(f"| send -> first socket write, {name} (ms) | {_stats(values)} |")
    for name, values in made.items():
        print(f"| the request object, {name} (us) | {_stats(values)} |")
    for name, values in model.items():
        print(f"| request made -> first socket write, {name} (ms) | {_stats(values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
