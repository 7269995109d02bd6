"""The bundled local model server (OpenAI and Anthropic APIs, scripted replies).

    server    `ModelServer`: the asyncio server, its queues, rules, faults and log
    thread    `ModelServerThread`: the same on its own loop, for synchronous callers
    cli       `agentd model-server` (`python -m agentd.testing.model_server`)
    http      the small HTTP/1.1 layer it serves over
    replies   which reply answers a request, and the reply dicts' keys
    wire      replies as OpenAI / Anthropic bodies and event streams

The names tests, the demo and the benchmarks use are re-exported here.
"""

from agentd.testing.model_server.cli import main
from agentd.testing.model_server.replies import parse_reply
from agentd.testing.model_server.server import ModelServer
from agentd.testing.model_server.thread import ModelServerThread

__all__ = ["ModelServer", "ModelServerThread", "main", "parse_reply"]
