-- A Neovim that tests/run.lua starts and that quits while a run_command it
-- was asked for still runs: the plugin must stop the command, with what it
-- started, as Neovim exits (VimLeavePre). run.lua then checks the pids.
--
--   nvim --headless -u NONE -i NONE -n -l tests/exit_child.lua
--
-- Env: AGENTD_BIN, AGENTD_TEST_URL (the model server's base URL),
-- AGENTD_TEST_HOME, AGENTD_TEST_ROOT (a project root), AGENTD_TEST_PIDS
-- (where the command writes the pids of its shell and of its background
-- child), AGENTD_TEST_QUIT: `qall` (the default) or `wait` (for the test
-- to send a signal, as a closed terminal does). Prints `running` once the
-- command runs, then quits or waits; exits 1 (`failed: ...`) if it never ran.

local here = vim.fs.dirname(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p'))
vim.opt.rtp:prepend(vim.fs.dirname(here))
vim.cmd('runtime plugin/agentd.lua')

local root = assert(os.getenv('AGENTD_TEST_ROOT'))
local pids = assert(os.getenv('AGENTD_TEST_PIDS'))
vim.cmd.cd(vim.fn.fnameescape(root))

vim.lsp.config('agentd', {
  cmd = { os.getenv('AGENTD_BIN') or 'agentd', 'serve' },
  cmd_env = {
    AGENTD_BASE_URL = assert(os.getenv('AGENTD_TEST_URL')) .. '/v1',
    AGENTD_API_KEY = 'test',
    AGENTD_MODEL = 'test',
    AGENTD_HOME = assert(os.getenv('AGENTD_TEST_HOME')),
  },
})
local agentd = require('agentd')
agentd.setup({ auto_approve = { run_command = true }, open_chat = false })

local function quit(msg)
  io.stdout:write(msg, '\n')
  io.stdout:flush()
  if msg ~= 'running' then
    vim.cmd('cquit! 1')
  elseif os.getenv('AGENTD_TEST_QUIT') == 'wait' then
    vim.wait(60000, function()
      return false
    end, 100)
    vim.cmd('cquit! 1') -- no signal came
  else
    vim.cmd('qall!')
  end
end

local command = ('sleep 60 & echo $$ $! > %s; wait'):format(pids)
if not agentd.ask('!tool run_command ' .. vim.json.encode({ command = command })) then
  quit('failed: ask refused')
end
local ran = vim.wait(20000, function()
  local info = agentd.info(root) or {}
  return vim.fn.filereadable(pids) == 1 and (vim.fn.readfile(pids)[1] or ''):match('^%d+ %d+$') ~= nil and info.running == true
end, 20)
quit(ran and 'running' or 'failed: the command never ran')
