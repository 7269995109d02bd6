"""What tests, the demo and the benchmarks share: real parts to drive agentd with.

    model_server   the bundled local model server (OpenAI and Anthropic APIs, scripted)
    daemon         the daemon's environment and command line, spawned as an editor does
    framing        JSON-RPC messages as an editor writes and reads them (LSP frames, ACP lines)
    stdio_client   a request/response client (the demo, the benchmarks)
    raw_client     a raw peer, for what no client library sends (the tests, cold-start figures)

The pytest fixtures built on these are in `tests/conftest.py`.
"""
