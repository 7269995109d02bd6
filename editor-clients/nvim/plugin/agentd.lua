-- User commands of agentd. The work is in lua/agentd, loaded on first use so
-- that startup costs nothing.
if vim.g.loaded_agentd then
  return
end
vim.g.loaded_agentd = true

if vim.fn.has('nvim-0.11') == 0 then
  -- vim.lsp.config, client:request returning the id, and start(..., {attach=false}) are 0.11.
  vim.notify_once('agentd: Neovim 0.11 or newer is needed', vim.log.levels.WARN)
  return
end

local function agentd()
  return require('agentd')
end

local cmd = vim.api.nvim_create_user_command

cmd('AgentdAsk', function(o)
  if o.args ~= '' then
    return agentd().ask(o.args)
  end
  vim.ui.input({ prompt = 'agentd> ' }, function(text)
    if text and vim.trim(text) ~= '' then
      agentd().ask(text)
    end
  end)
end, {
  nargs = '*',
  -- `/` and a slash command's name (agent/listCommands): `/compact`, `/init`, ...
  complete = function(arglead, cmdline)
    return agentd().complete_ask(arglead, cmdline)
  end,
  desc = 'agentd: ask a prompt, or run a slash command (/compact, /memory, ...; no argument: type it)',
})

cmd('AgentdCancel', function()
  agentd().cancel()
end, { desc = 'agentd: cancel the running prompt' })

cmd('AgentdNew', function()
  agentd().new_session()
end, { desc = 'agentd: start a new session' })

cmd('AgentdReset', function()
  agentd().reset()
end, { desc = "agentd: clear the session's history" })

cmd('AgentdCompact', function(o)
  agentd().compact(o.args)
end, { nargs = '*', desc = "agentd: compact the conversation now (optional: what to keep)" })

cmd('AgentdMode', function(o)
  agentd().set_mode(o.args)
end, {
  nargs = '?',
  complete = function(arglead)
    return agentd().complete_setup('modes', arglead)
  end,
  desc = "agentd: the session's mode: ask, code or auto-edit (no argument: pick one)",
})

cmd('AgentdModel', function(o)
  agentd().set_model(o.args)
end, {
  nargs = '?',
  complete = function(arglead)
    return agentd().complete_setup('models', arglead)
  end,
  desc = "agentd: the session's model among the configured ones (no argument: pick one)",
})

cmd('AgentdSessions', function(o)
  agentd().sessions(o.args ~= '' and { action = o.args } or nil)
end, {
  nargs = '?',
  complete = function()
    return { 'open', 'fork', 'delete' }
  end,
  desc = 'agentd: pick a saved session of the project, then open, fork or delete it',
})

cmd('AgentdMemory', function(o)
  agentd().memory({ folder = o.bang })
end, { bang = true, desc = 'agentd: list the memories (!: open the memory folder)' })

cmd('AgentdStatus', function()
  agentd().status()
end, { desc = 'agentd: memory, extraction and MCP server status' })

cmd('AgentdQuickfix', function()
  agentd().quickfix()
end, { desc = 'agentd: the last search or glob results in the quickfix list' })

cmd('AgentdChat', function()
  agentd().open_chat()
end, { desc = 'agentd: show the chat buffer' })
