-- Default configuration of the agentd client. vim.lsp.config() finds this file
-- on 'runtimepath' and merges the user's vim.lsp.config('agentd', {...}) on top.
---@type vim.lsp.Config
return {
  cmd = { 'agentd', 'serve' },
  -- No filetypes: agentd is not a language server for buffers. Even if a user
  -- calls vim.lsp.enable('agentd'), an empty list keeps it from attaching to
  -- every buffer; lua/agentd starts one client per project root itself, with
  -- vim.lsp.start(config, { attach = false }).
  filetypes = {},
  -- Read by lua/agentd to pick the project root (the first directory upwards
  -- holding one of these); without any, the current directory is the root.
  root_markers = { '.git', '.hg', '.svn', '.jj', 'pyproject.toml', 'package.json', 'Cargo.toml', 'go.mod' },
  init_options = {
    -- The tools this plugin runs inside Neovim (lua/agentd/tools.lua): edits
    -- land in buffers, read_file sees unsaved changes, commands are approved.
    clientTools = { 'edit_file', 'write_file', 'run_command', 'read_file' },
    -- This plugin answers agent/requestPermission (vim.ui.select): without
    -- it the daemon refuses every tool of its own that needs a yes (an MCP
    -- tool with side effects).
    requestPermission = true,
    -- It answers an MCP server's questions (agent/elicit, lua/agentd/elicit.lua)
    -- in both modes: without this the daemon declines them for the user.
    elicitation = { form = true, url = true },
    logLevel = 'warning',
  },
}
