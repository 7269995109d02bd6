-- :checkhealth agentd
local M = {}

function M.check()
  local health = vim.health
  health.start('agentd')

  if vim.fn.has('nvim-0.11') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.11 or newer is needed (vim.lsp.config, client:request ids)')
  end

  local cfg = vim.lsp.config.agentd
  if not cfg or not cfg.cmd then
    health.error('no agentd LSP config found', { 'put the plugin folder on runtimepath (it has lsp/agentd.lua)' })
    return
  end
  local cmd = cfg.cmd
  if type(cmd) == 'function' then
    health.info('cmd is a function (a custom transport): the executable is not checked')
  else
    local exe = cmd[1]
    local path = vim.fn.exepath(exe)
    if path == '' then
      health.error(('daemon %q not found on PATH'):format(exe), {
        'install agentd (pipx install agentd-editor, or pip install agentd-editor) or point cmd at it:',
        "vim.lsp.config('agentd', { cmd = { '/path/to/agentd', 'serve' } })",
      })
    else
      health.ok(('daemon found: %s (cmd: %s)'):format(path, table.concat(cmd, ' ')))
      local ok, res = pcall(function()
        return vim.system({ path, '--version' }, { text = true }):wait(15000)
      end)
      if not ok then
        health.error('`agentd --version` could not run: ' .. tostring(res))
      elseif res.code == 0 then
        health.ok('`agentd --version`: ' .. vim.trim((res.stdout or '') .. (res.stderr or '')))
      else
        local err = vim.trim(res.stderr or '')
        health.error(('`agentd --version` failed (exit %s): %s'):format(tostring(res.code), err:match('[^\n]*$') or err))
      end
    end
  end

  local want = require('agentd').PROTOCOL_VERSION
  local clients = vim.lsp.get_clients({ name = 'agentd' })
  if #clients == 0 then
    health.info(('no agentd client running: the protocol version is checked once :AgentdAsk has started one (this plugin speaks %d)'):format(want))
  end
  for _, c in ipairs(clients) do
    local caps = vim.tbl_get(c.server_capabilities or {}, 'experimental', 'agentd')
    local v = caps and caps.protocolVersion
    local where = ('client %d at %s'):format(c.id, tostring(c.root_dir))
    if not c.initialized then
      health.info(where .. ': still initializing')
    elseif v == want then
      health.ok(('%s: protocol version %d, agentd %s'):format(where, v, tostring(caps.version)))
    elseif v == nil then
      health.error(where .. ': the initialize result has no capabilities.experimental.agentd.protocolVersion')
    else
      health.warn(('%s: protocol version %s, this plugin speaks %d'):format(where, tostring(v), want))
    end
  end
end

return M
