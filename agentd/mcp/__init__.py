"""MCP servers: the user's and the editor's Model Context Protocol tools.

    manager.McpManager          which servers exist, sharing, status, shutdown
    connection.McpConnection    one server: start, watch, restart, stop (the SDK)
    session_tools.SessionMcpTools  a session's MCP tools for the turn engine:
                                specs, permission, calls, results
    names                       model-facing names and schemas (pure)
    results                     a CallToolResult -> text for the model (pure)
    cli                         `agentd mcp list|status`

Built on the official `mcp` SDK, imported only when a server starts: a
daemon with no server configured never loads it.
"""
