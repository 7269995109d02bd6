"""The Agent Client Protocol front end: newline-delimited JSON-RPC over stdio.

Beside `agentd/lsp/`, over the same `AgentCore`; nothing of ACP lives in the
core. Entry point: `agentd.acp.server.run_acp_stdio` (`agentd serve --acp`,
or `python -m agentd.acp`).
"""
