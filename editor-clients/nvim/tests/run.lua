-- End-to-end tests of the Neovim client against the real `agentd serve` and
-- the bundled local model server (`agentd model-server`).
--
--   nvim --headless -u NONE -l tests/run.lua     (from editor-clients/nvim, or anywhere)
--
-- Env: AGENTD_BIN (default `agentd`); AGENTD_TEST_FILTER runs only the
-- tests whose name contains it (plain text; the others are not counted). Prints `N passed, N failed, N skipped`
-- last and exits non-zero when a test failed. Every wait is vim.wait() on a
-- condition, with a generous limit; none is a fixed sleep.

local api = vim.api
local uv = vim.uv

local here = vim.fs.dirname(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p'))
local plugin_root = vim.fs.dirname(here)
vim.opt.rtp:prepend(plugin_root)
vim.cmd('runtime plugin/agentd.lua') -- -u NONE loads no plugins by itself

local AGENTD = os.getenv('AGENTD_BIN') or 'agentd'
local TIMEOUT = 20000

local agentd = require('agentd')

-- print() in `nvim -l` goes through the message area (stderr, CR LF, lines
-- merged with other messages); test output is plain stdout lines.
local function out(text)
  io.stdout:write(text, '\n')
  io.stdout:flush()
end
local chat = require('agentd.chat')

-- --- a tiny test harness ----------------------------------------------------------

local counts = { passed = 0, failed = 0, skipped = 0 }
local SKIP = {}

local function skip(reason)
  error(setmetatable({ reason = reason }, SKIP), 0)
end

local FILTER = os.getenv('AGENTD_TEST_FILTER')

local function test(name, fn)
  if FILTER and FILTER ~= '' and not name:find(FILTER, 1, true) then
    return
  end
  local ok, err = xpcall(fn, function(e)
    if getmetatable(e) == SKIP then
      return e
    end
    return debug.traceback(tostring(e), 2)
  end)
  if ok then
    counts.passed = counts.passed + 1
    out('ok      ' .. name)
  elseif getmetatable(err) == SKIP then
    counts.skipped = counts.skipped + 1
    out('skipped ' .. name .. ': ' .. err.reason)
  else
    counts.failed = counts.failed + 1
    out('FAILED  ' .. name .. '\n' .. err)
    out('--- chat buffer ---\n' .. chat.content() .. '\n-------------------')
  end
end

local function check(cond, msg, ...)
  if not cond then
    error(string.format(msg or 'check failed', ...), 2)
  end
end

--- vim.wait that fails the test (with `what`) when the condition never holds.
local function wait_for(what, pred, timeout)
  local ok = vim.wait(timeout or TIMEOUT, pred, 20)
  if not ok then
    error('timed out waiting for ' .. what, 2)
  end
end

local function contains(hay, needle)
  return hay:find(needle, 1, true) ~= nil
end

-- --- fixtures ------------------------------------------------------------------------

local tmp = vim.fn.tempname()
local root = tmp .. '/proj'
local home = tmp .. '/home'
vim.fn.mkdir(root .. '/.git', 'p') -- a root marker
vim.fn.mkdir(home, 'p')
root = uv.fs_realpath(root)
vim.fn.writefile({ 'hello x' }, root .. '/a.txt')
vim.fn.writefile({ 'secret' }, tmp .. '/outside.txt')
vim.cmd.cd(vim.fn.fnameescape(root))

-- The model server prints one JSON line with its URL, then serves.
local server_out = ''
local server = vim.system({ AGENTD, 'model-server', '--port', '0' }, {
  stdout = function(_, data)
    if data then
      server_out = server_out .. data
    end
  end,
  stderr = function() end,
})

local ok_server = vim.wait(TIMEOUT, function()
  return server_out:find('\n') ~= nil
end, 20)
local info = ok_server and vim.json.decode(server_out:match('^[^\n]+')) or nil
if not info or not info.url then
  out('could not start `' .. AGENTD .. ' model-server --port 0`: ' .. server_out)
  out('0 passed, 1 failed')
  pcall(server.kill, server, 15)
  os.exit(1)
end
local port = info.port

--- GET a path of the model server; cb(body|nil, err) from a libuv callback.
local function http_get(path, cb)
  local tcp = uv.new_tcp()
  local parts = {}
  tcp:connect('127.0.0.1', port, function(err)
    if err then
      tcp:close()
      return cb(nil, err)
    end
    tcp:read_start(function(rerr, data)
      if rerr then
        tcp:close()
        return cb(nil, rerr)
      end
      if data then
        parts[#parts + 1] = data
      else
        tcp:close()
        local raw = table.concat(parts)
        cb(raw:match('\r\n\r\n(.*)$'))
      end
    end)
    -- HTTP/1.0 without keep-alive: the server closes after the body.
    tcp:write(('GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n'):format(path))
  end)
end

--- Wait until the model server's log holds an entry for which pred(entry) is true.
local function wait_log(what, pred, timeout)
  local found, pending = false, false
  wait_for(what, function()
    if not pending and not found then
      pending = true
      http_get('/_agentd/log', function(body)
        vim.schedule(function()
          pending = false
          local ok, entries = pcall(vim.json.decode, body or '')
          if ok and type(entries) == 'table' then
            for _, e in ipairs(entries) do
              if pred(e) then
                found = true
              end
            end
          end
        end)
      end)
    end
    return found
  end, timeout)
end

-- Record raw agent/update kinds as the LSP layer delivers them, to tell a
-- daemon that sends nothing from a plugin that renders nothing.
-- AGENTD_TEST_RECORD=FILE also appends each message from the daemon that
-- the plugin handles to FILE, one JSON line each (how tests/recorded/ was made).
local seen_kinds = {}
local record = os.getenv('AGENTD_TEST_RECORD')
local function recorded(method, params)
  if record then
    local f = assert(io.open(record, 'a'))
    f:write(vim.json.encode({ method = method, params = params }), '\n')
    f:close()
  end
end
local real_update = agentd.handlers['agent/update']
agentd.handlers['agent/update'] = function(err, params, ctx)
  if type(params) == 'table' and type(params.update) == 'table' then
    seen_kinds[params.update.kind] = (seen_kinds[params.update.kind] or 0) + 1
  end
  recorded('agent/update', params)
  return real_update(err, params, ctx)
end
local real_permission = agentd.handlers['agent/requestPermission']
agentd.handlers['agent/requestPermission'] = function(err, params, ctx)
  recorded('agent/requestPermission', params)
  return real_permission(err, params, ctx)
end

vim.lsp.config('agentd', {
  cmd = { AGENTD, 'serve' },
  cmd_env = {
    AGENTD_BASE_URL = info.url .. '/v1',
    AGENTD_API_KEY = 'test',
    AGENTD_MODEL = 'test',
    AGENTD_HOME = home,
  },
  -- Models a session may switch to (:AgentdModel); a daemon without model
  -- choice ignores the key.
  init_options = { models = { 'test', 'test-2' } },
})
local approvals = { edit_file = true, write_file = true, run_command = true }
agentd.setup({ auto_approve = approvals })

local function state()
  return agentd.info(root) or {}
end

--- Wait for the running turn to end; returns its footer label.
local function wait_turn(timeout)
  wait_for('the turn to end', function()
    local s = state()
    return s.client_id ~= nil and not s.running
  end, timeout)
  return state().last_stop or ''
end

local function ask_and_wait(prompt)
  check(agentd.ask(prompt) ~= nil, 'ask refused')
  return wait_turn()
end

local function client()
  return vim.lsp.get_client_by_id(state().client_id)
end

--- Run body() with vim.ui.select replaced by choose(items, opts) -> the item
--- to answer (nil: dismissed; answered on the next tick, as a real picker
--- would). Returns what was offered: { {items, opts}, ... }.
local function with_select(choose, body)
  local real_select = vim.ui.select
  local offered = {}
  vim.ui.select = function(items, opts, cb)
    offered[#offered + 1] = { items = items, opts = opts }
    local item = choose(items, opts)
    if item ~= false then
      vim.schedule(function()
        cb(item, item and vim.fn.index(items, item) + 1 or nil)
      end)
    end
  end
  local ok, err = pcall(body)
  vim.ui.select = real_select
  if not ok then
    error(err, 0)
  end
  return offered
end

--- Run body() with vim.ui.select replaced by a picker that, like telescope's,
--- fzf-lua's or snacks', opens a floating window (focused) and waits there
--- for a user who never answers. Returns the windows it opened and each
--- picker's on_choice (to answer late); body(wins, answers) sees them too.
local function with_float_picker(body)
  local real_select = vim.ui.select
  local wins, answers = {}, {}
  vim.ui.select = function(items, opts, on_choice)
    local buf = api.nvim_create_buf(false, true)
    api.nvim_buf_set_lines(buf, 0, -1, false, vim.tbl_map(opts.format_item or tostring, items))
    local win = api.nvim_open_win(buf, true, {
      relative = 'editor',
      row = 1,
      col = 1,
      width = 40,
      height = #items,
      style = 'minimal',
    })
    wins[#wins + 1] = win
    answers[#answers + 1] = on_choice
  end
  local ok, err = pcall(body, wins, answers)
  vim.ui.select = real_select
  if not ok then
    error(err, 0)
  end
  return wins, answers
end

--- A daemon without a feature: `cmd` says so (a notification containing
--- `says`) and offers nothing to pick.
local function check_hidden(cmd, says)
  local messages, offered = {}, {}
  local real_notify = vim.notify
  vim.notify = function(msg)
    messages[#messages + 1] = tostring(msg)
  end
  local ok, err = pcall(function()
    offered = with_select(function() end, function()
      vim.cmd(cmd)
      wait_for(cmd .. ' to say ' .. says, function()
        return vim.iter(messages):any(function(m)
          return contains(m, says)
        end)
      end)
    end)
  end)
  vim.notify = real_notify
  if not ok then
    error(err, 0)
  end
  check(#offered == 0, '%s offered a choice', cmd)
end

--- The item of `items` whose `field` is `value`.
local function item_with(field, value)
  return function(items)
    for _, it in ipairs(items) do
      if it[field] == value then
        return it
      end
    end
  end
end

--- A chooser for :AgentdSessions: the session `sid`, then the action
--- `action` ('open', 'fork', 'delete'), then `confirm` for a confirmation.
local function session_chooser(sid, action, confirm)
  return function(items, opts)
    if opts.kind == 'agentd_session' then
      return item_with('sessionId', sid)(items)
    elseif opts.kind == 'agentd_session_action' then
      return item_with('action', action)(items)
    elseif opts.kind == 'agentd_confirm' then
      return confirm
    end
  end
end

--- A request straight to the daemon, waited for: err, result.
local function request(method, params)
  local done, err, res = false, nil, nil
  client():request(method, params, function(e, r)
    done, err, res = true, e, r
  end)
  wait_for(method .. ' reply', function()
    return done
  end)
  return err, res
end

-- --- tests -----------------------------------------------------------------------

test(':AgentdAsk streams the answer into agentd://chat', function()
  vim.cmd('AgentdAsk hello from neovim')
  local stop = wait_turn()
  check(stop:match('^end_turn'), 'stop reason: %s', stop)
  local text = chat.content()
  check(contains(text, '## You\n\nhello from neovim'), 'prompt not shown')
  check(contains(text, 'Echo: hello from neovim'), 'answer not shown')
  check((seen_kinds.message_chunk or 0) >= 2, 'expected several message_chunk updates, got %s', tostring(seen_kinds.message_chunk))
  check(#vim.fn.win_findbuf(chat.buf()) > 0, 'chat window not opened')
  check(api.nvim_buf_get_name(chat.buf()) == 'agentd://chat', 'chat buffer name')
  check(vim.bo[chat.buf()].filetype == 'markdown', 'chat filetype')
end)

test(':AgentdAsk without an argument asks with vim.ui.input', function()
  local real_input = vim.ui.input
  local asked
  vim.ui.input = function(opts, cb)
    asked = opts.prompt
    cb('typed prompt')
  end
  local ok, err = pcall(vim.cmd, 'AgentdAsk')
  vim.ui.input = real_input
  check(ok, tostring(err))
  check(asked == 'agentd> ', 'input prompt: %s', tostring(asked))
  wait_turn()
  check(contains(chat.content(), 'Echo: typed prompt'), 'answer')
end)

test('the daemon runs per root and attaches to no buffer', function()
  local c = client()
  check(c and c.name == 'agentd', 'no agentd client')
  check(c.root_dir == root, 'root_dir %s ~= %s', tostring(c.root_dir), root)
  check(vim.tbl_count(c.attached_buffers) == 0, 'client attached to buffers')
  local caps = vim.tbl_get(c.server_capabilities, 'experimental', 'agentd')
  check(caps and caps.protocolVersion == 1, 'protocolVersion')
  check(vim.tbl_contains(caps.clientTools or {}, 'edit_file'), 'edit_file not accepted as client tool: %s', vim.inspect(caps.clientTools))
end)

test('chunks appear while the answer is still streaming', function()
  check(agentd.ask('!delay 0.1\nalpha beta gamma delta epsilon zeta') ~= nil, 'ask refused')
  local partial = false
  wait_for('partial text', function()
    local t = chat.content()
    -- (the prompt itself holds every word: look at the answer only)
    local answer = t:match('\nEcho: alpha[^\n]*$')
    if answer and not contains(answer, 'zeta') and state().running then
      partial = true
    end
    return partial or not state().running
  end)
  check(partial, 'never saw a partial answer')
  local stop = wait_turn()
  check(stop:match('^end_turn'), 'stop reason: %s', stop)
  check(contains(chat.content(), 'Echo: alpha beta gamma delta epsilon zeta'), 'full answer')
end)

test(':AgentdCancel stops the stream, shows it at once, and the next ask works', function()
  check(agentd.ask('!delay 0.2\n!chunks 50') ~= nil, 'ask refused')
  wait_for('the stream to start', function()
    return contains(chat.content(), 'w2')
  end)
  -- The next prompt must be released by the daemon's acknowledgement (seen
  -- through LspRequest), never by the fallback timer: make that one too long.
  agentd.config.cancel_ack_timeout = 60000
  vim.cmd('AgentdCancel')
  -- At once: no wait for the daemon.
  check(not state().running, 'turn still running after cancel')
  local after_cancel = chat.content()
  check(after_cancel:match('_cancelled_%s*$'), 'chat does not end with the cancelled mark')
  -- The next prompt at once: it waits for the cancel's acknowledgement itself.
  check(agentd.ask('after cancel') ~= nil, 'ask after cancel refused')
  local ok, err = pcall(wait_turn)
  agentd.config.cancel_ack_timeout = 5000
  check(ok, tostring(err))
  local stop = state().last_stop or ''
  check(stop:match('^end_turn'), 'stop reason after cancel: %s', stop)
  local text = chat.content()
  check(contains(text, 'Echo: after cancel'), 'answer after cancel')
  local cancelled_part = text:sub(1, #after_cancel)
  check(cancelled_part == after_cancel, 'cancelled turn changed after the cancel')
  check(not contains(text, 'w50'), 'the cancelled stream went on')
  -- $/cancelRequest reached the daemon: it closed the model stream.
  wait_log('a disconnect in the model server log', function(e)
    return e.type == 'disconnect'
  end)
end)

test('edit_file: the buffer is changed, one undo restores it, disk untouched', function()
  local stop = ask_and_wait('!tool edit_file {"path": "a.txt", "old_text": "x", "new_text": "y"}')
  check(stop:match('^end_turn'), 'stop reason: %s', stop)
  local buf = chat.find(root .. '/a.txt')
  check(buf and api.nvim_buf_is_loaded(buf), 'a.txt not loaded')
  check(vim.deep_equal(api.nvim_buf_get_lines(buf, 0, -1, false), { 'hello y' }), 'buffer: %s', vim.inspect(api.nvim_buf_get_lines(buf, 0, -1, false)))
  check(vim.bo[buf].modified, 'buffer not marked modified')
  check(vim.deep_equal(vim.fn.readfile(root .. '/a.txt'), { 'hello x' }), 'disk changed')
  local text = chat.content()
  check(contains(text, '- tool **edit_file** `a.txt` · editor — completed'), 'tool line')
  check(contains(text, 'Tool result received: Applied the edit to a.txt'), 'tool result not fed back')
  check(vim.tbl_count(client().attached_buffers) == 0, 'client attached to a.txt')
  api.nvim_buf_call(buf, function()
    vim.cmd('silent undo')
  end)
  check(vim.deep_equal(api.nvim_buf_get_lines(buf, 0, -1, false), { 'hello x' }), 'undo: %s', vim.inspect(api.nvim_buf_get_lines(buf, 0, -1, false)))
end)

test('two edits are two undo steps', function()
  vim.fn.writefile({ 'one', 'two' }, root .. '/u.txt')
  ask_and_wait('!tool edit_file {"path": "u.txt", "old_text": "one", "new_text": "ONE"}')
  ask_and_wait('!tool edit_file {"path": "u.txt", "old_text": "two", "new_text": "TWO"}')
  local buf = chat.find(root .. '/u.txt')
  check(vim.deep_equal(api.nvim_buf_get_lines(buf, 0, -1, false), { 'ONE', 'TWO' }), 'edits')
  api.nvim_buf_call(buf, function()
    vim.cmd('silent undo')
  end)
  check(vim.deep_equal(api.nvim_buf_get_lines(buf, 0, -1, false), { 'ONE', 'two' }), 'one undo: %s', vim.inspect(api.nvim_buf_get_lines(buf, 0, -1, false)))
end)

test('an edit declined in vim.ui.select is reported to the model as an error', function()
  -- Not in auto_approve: the default question, answered "No".
  approvals.edit_file = nil
  local real_select = vim.ui.select
  local question, items
  vim.ui.select = function(choices, opts, cb)
    items, question = choices, opts.prompt
    vim.schedule(function()
      cb('No', 2)
    end)
  end
  local ok, err = pcall(ask_and_wait, '!tool edit_file {"path": "a.txt", "old_text": "x", "new_text": "z"}')
  vim.ui.select = real_select
  approvals.edit_file = true
  check(ok, tostring(err))
  check(vim.deep_equal(items, { 'Yes', 'No' }), 'choices: %s', vim.inspect(items))
  check(question == 'agentd wants to edit a.txt:\n- x\n+ z\nApply?', 'question: %s', tostring(question))
  local buf = chat.find(root .. '/a.txt')
  check(vim.deep_equal(api.nvim_buf_get_lines(buf, 0, -1, false), { 'hello x' }), 'declined edit applied')
  local text = chat.content()
  check(contains(text, '— declined: The user declined the edit_file call.'), 'declined line')
  check(contains(text, 'Tool result received: The user declined'), 'refusal not fed back')
end)

--- Ask for an edit that waits on its Yes/No question in a floating picker
--- and withdraw it with `withdraw()` while it is open. Returns whether the
--- picker was still open once the chat showed the call cancelled (before
--- the turn ended), after which it answers the question Yes, late.
local function withdrawn_edit(new_text, withdraw)
  approvals.edit_file = nil
  local pickers, answers, open_after
  local ok, err = pcall(function()
    pickers, answers = with_float_picker(function(wins)
      local edit = ('!tool edit_file {"path": "a.txt", "old_text": "x", "new_text": "%s"}'):format(new_text)
      check(agentd.ask(edit) ~= nil, 'ask refused')
      -- (The last turn's lines: the chat holds the earlier turns too.)
      local function last_turn()
        return chat.content():match('.*## You\n(.*)$') or ''
      end
      wait_for('the question', function()
        return contains(last_turn(), '`a.txt` · editor — awaiting approval')
      end)
      withdraw()
      wait_for('the call cancelled', function()
        return contains(last_turn(), '- tool **edit_file** `a.txt` · editor — cancelled')
      end)
      open_after = #wins == 1 and api.nvim_win_is_valid(wins[1])
      wait_turn()
    end)
  end)
  approvals.edit_file = true
  check(ok, tostring(err))
  check(#pickers == 1, 'questions: %d', #pickers)
  answers[1]('Yes', 1)
  return open_after
end

--- The lines of a.txt's buffer.
local function a_lines()
  return api.nvim_buf_get_lines(chat.find(root .. '/a.txt'), 0, -1, false)
end

test('an edit question open when the prompt is cancelled has its picker closed, and a late Yes applies nothing', function()
  local open = withdrawn_edit('cancelled', function()
    agentd.cancel()
  end)
  check(not open, 'the picker stayed open after the cancel')
  check(vim.deep_equal(a_lines(), { 'hello x' }), 'the withdrawn edit was applied: %s', vim.inspect(a_lines()))
  local stop = ask_and_wait('after the withdrawn edit')
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

test('an edit question the daemon withdraws (its prompt cancelled elsewhere) has its picker closed and ends the turn', function()
  local sid = state().session_id
  -- agent/cancel is what another panel of the same daemon would send: the
  -- daemon reports the call `cancelled`, then answers the prompt -32800.
  local open = withdrawn_edit('withdrawn', function()
    client():notify('agent/cancel', { sessionId = sid })
  end)
  check(not open, 'the picker stayed open after the daemon withdrew the call')
  check(state().last_stop == 'cancelled', 'stop: %s', tostring(state().last_stop))
  check(vim.deep_equal(a_lines(), { 'hello x' }), 'the withdrawn edit was applied: %s', vim.inspect(a_lines()))
  local stop = ask_and_wait('after the edit the daemon withdrew')
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

test('a confirm hook is told when its question is withdrawn (by a cancel here or in the daemon), and a late yes applies nothing', function()
  local sid = state().session_id
  local withdrawals = {
    here = function()
      agentd.cancel()
    end,
    daemon = function()
      client():notify('agent/cancel', { sessionId = sid })
    end,
  }
  for _, how in ipairs({ 'here', 'daemon' }) do
    approvals.edit_file = nil
    local answer, closed = nil, 0
    -- A hook with its own question (a window, say): it returns what closes it.
    agentd.config.confirm = function(_, _, _, cb)
      answer = cb
      return function()
        closed = closed + 1
      end
    end
    local ok, err = pcall(function()
      local edit = ('!tool edit_file {"path": "a.txt", "old_text": "x", "new_text": "hook-%s"}'):format(how)
      check(agentd.ask(edit) ~= nil, 'ask refused')
      local function last_turn()
        return chat.content():match('.*## You\n(.*)$') or ''
      end
      wait_for('the question', function()
        return answer ~= nil and contains(last_turn(), '`a.txt` · editor — awaiting approval')
      end)
      check(closed == 0, 'closed before it was withdrawn')
      withdrawals[how]()
      wait_for('the call cancelled', function()
        return contains(last_turn(), '- tool **edit_file** `a.txt` · editor — cancelled')
      end)
      wait_turn()
    end)
    approvals.edit_file = true
    agentd.config.confirm = nil
    check(ok, tostring(err))
    check(closed == 1, '%s: the close function was called %d times', how, closed)
    answer(true) -- the user answers the withdrawn question, late
    check(vim.deep_equal(a_lines(), { 'hello x' }), '%s: the withdrawn edit was applied: %s', how, vim.inspect(a_lines()))
    check(closed == 1, '%s: closed again by the late answer', how)
  end
  local stop = ask_and_wait('after the hook questions were withdrawn')
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

test('read_file answers from the unsaved buffer', function()
  local buf = chat.find(root .. '/a.txt')
  api.nvim_buf_set_lines(buf, 0, -1, false, { 'unsaved text' })
  ask_and_wait('!tool read_file {"path": "a.txt"}')
  check(contains(chat.content(), 'Tool result received: 1  unsaved text'), 'read_file result')
end)

test(':AgentdQuickfix puts the last search results in the quickfix list', function()
  vim.fn.writefile({ 'first line', 'the hello line', 'hello again' }, root .. '/b.txt')
  ask_and_wait('!tool search {"query": "hello", "path": "b.txt"}')
  check(contains(chat.content(), '2 locations, :AgentdQuickfix'), 'locations not announced')
  vim.cmd('AgentdQuickfix')
  local qf = vim.fn.getqflist({ title = 1, items = 1 })
  check(contains(qf.title, 'agentd: search'), 'title: %s', qf.title)
  check(#qf.items == 2, 'items: %d', #qf.items)
  local first = qf.items[1]
  check(vim.api.nvim_buf_get_name(first.bufnr) == root .. '/b.txt', 'file: %s', vim.api.nvim_buf_get_name(first.bufnr))
  check(first.lnum == 2 and first.text == 'the hello line', 'first item: %d %s', first.lnum, first.text)
  check(qf.items[2].lnum == 3 and qf.items[2].text == 'hello again', 'second item')
  vim.cmd('cclose')
  ask_and_wait('!tool glob {"pattern": "*.txt", "sort": "path"}')
  local n = agentd.quickfix({ open = false })
  check(n >= 2 and n == #vim.fn.getqflist(), 'glob results: %d', n)
  check(vim.fn.getqflist()[1].lnum == 1, 'a glob result is a whole file')
end)

test('paths outside the root are refused', function()
  ask_and_wait('!tool read_file {"path": "../outside.txt"}')
  local text = chat.content()
  check(contains(text, '— failed: ../outside.txt is outside the workspace'), 'refusal line')
  check(not contains(text, 'secret'), 'outside file was read')
  ask_and_wait('!tool write_file {"path": "/tmp/agentd-nvim-escape.txt", "content": "no"}')
  check(vim.fn.filereadable('/tmp/agentd-nvim-escape.txt') == 0, 'wrote outside the root')
  check(contains(chat.content(), 'is outside the workspace'), 'write refusal')
end)

test('write_file creates a buffer (approved through the confirm hook); run_command reports output and exit code', function()
  -- The confirm hook answers later, as a real prompt would.
  approvals.write_file = nil
  local question
  agentd.config.confirm = function(name, _, q, cb)
    question = name .. ': ' .. q
    vim.schedule(function()
      cb(true)
    end)
  end
  local ok, err = pcall(ask_and_wait, '!tool write_file {"path": "sub/new.txt", "content": "line 1\\nline 2\\n"}')
  approvals.write_file = true
  agentd.config.confirm = nil
  check(ok, tostring(err))
  check(question and contains(question, 'write_file: agentd wants to write sub/new.txt'), 'question: %s', tostring(question))
  local buf = chat.find(root .. '/sub/new.txt')
  check(buf, 'no buffer for the new file')
  check(vim.deep_equal(api.nvim_buf_get_lines(buf, 0, -1, false), { 'line 1', 'line 2' }), 'content')
  ask_and_wait('!tool run_command {"command": "echo hi-from-sh; exit 3"}')
  local text = chat.content()
  check(contains(text, 'Tool result received: $ echo hi-from-sh; exit 3\nhi-from-sh\n[exit code 3]'), 'run_command result')
  check(contains(text, '`echo hi-from-sh; exit 3` · editor — completed (exit code 3)'), 'run_command line')
end)

--- Whether process `pid` runs: a zombie (dead, not yet reaped by its
--- parent, which for an orphan is init) does not.
local function alive(pid)
  if uv.kill(pid, 0) ~= 0 then
    return false
  end
  if not uv.fs_stat('/proc/self/stat') then
    return true -- no /proc: kill's answer is all there is
  end
  local f = io.open(('/proc/%d/stat'):format(pid), 'r')
  if not f then
    return false
  end
  local stat = f:read('*a') or ''
  f:close()
  return stat:match('^%d+ %b() (%a)') ~= 'Z'
end

--- Ask for a run_command whose shell starts a child in the background and
--- waits for it, and wait until it runs. Returns the pids of the shell and
--- of the child: killing the shell alone would leave the child running.
local function start_command(tag)
  local pids = ('%s/pids-%s'):format(tmp, tag)
  local command = ('sleep 60 & echo $$ $! > %s; wait'):format(pids)
  check(agentd.ask('!tool run_command ' .. vim.json.encode({ command = command })) ~= nil, 'ask refused')
  local sh, child
  wait_for('the command to run', function()
    if vim.fn.filereadable(pids) == 1 then
      sh, child = (vim.fn.readfile(pids)[1] or ''):match('^(%d+) (%d+)$')
    end
    return sh ~= nil and contains(chat.content(), ' · editor — running')
  end)
  sh, child = tonumber(sh), tonumber(child)
  check(alive(sh) and alive(child), 'the command is not running')
  return sh, child
end

--- Wait until the shell and its child are gone (SIGTERM to their group).
local function wait_killed(sh, child)
  wait_for('the command and its child to be killed', function()
    return not alive(sh) and not alive(child)
  end)
end

test('cancel kills a running command, with the processes it started, and the session goes on', function()
  local sh, child = start_command('cancel')
  agentd.cancel()
  check(contains(chat.content(), ' · editor — cancelled'), 'tool line not cancelled')
  wait_killed(sh, child)
  local stop = ask_and_wait('still here')
  check(stop:match('^end_turn'), 'stop: %s', stop)
  -- The model server's default responder currently answers this prompt with
  -- "Tool result received: ..." (it treats a conversation whose last
  -- non-user message is the cancelled tool result as a tool-result turn), so
  -- only an answer of some kind is required here.
  local answer = chat.content():match('## You\n\nstill here\n\n## agentd\n\n(.-)\n\n_end_turn')
  check(answer and answer ~= '', 'no answer after the cancel')
end)

test('a running command the daemon withdraws is killed, with the processes it started', function()
  local sid = state().session_id
  local sh, child = start_command('withdrawn')
  -- agent/cancel, as another panel of the same daemon would send it: the
  -- daemon withdraws the call (tool_call_update cancelled), then the prompt.
  client():notify('agent/cancel', { sessionId = sid })
  wait_for('the call withdrawn', function()
    local last = chat.content():match('.*## You\n(.*)$') or ''
    return contains(last, ' · editor — cancelled')
  end)
  wait_killed(sh, child)
  check(wait_turn() == 'cancelled', 'stop: %s', tostring(state().last_stop))
  local stop = ask_and_wait('after the withdrawn command')
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

test('a command over command_timeout is stopped with the processes it started, and reported timed out', function()
  local pids = tmp .. '/pids-timeout'
  local command = ('sleep 60 & echo $$ $! > %s; wait'):format(pids)
  -- Long enough for the shell to write its pids first on a loaded machine.
  agentd.config.command_timeout = 3000
  local ok, err = pcall(ask_and_wait, '!tool run_command ' .. vim.json.encode({ command = command }))
  agentd.config.command_timeout = 120000
  check(ok, tostring(err)) -- (the child holds the output pipe: no result while it runs)
  local sh, child = (vim.fn.readfile(pids)[1] or ''):match('^(%d+) (%d+)$')
  check(sh and child, 'no pids')
  wait_killed(tonumber(sh), tonumber(child))
  local text = chat.content()
  check(contains(text, '[timed out after 3000 ms, killed by signal 15]'), 'no timeout in the result')
end)

for _, how in ipairs({ 'qall', 'SIGHUP' }) do
  test(('a command still running when Neovim exits (%s) is killed, with the processes it started'):format(how), function()
    -- Another Neovim (tests/exit_child.lua), with a daemon of its own on the
    -- same model server, asks for the command and quits while it runs, or
    -- gets the hang-up of a closed terminal.
    local child_root = tmp .. '/exitproj-' .. how
    vim.fn.mkdir(child_root .. '/.git', 'p')
    local pids = ('%s/pids-exit-%s'):format(tmp, how)
    local said = ''
    local nvim = vim.system({ vim.v.progpath, '--headless', '-u', 'NONE', '-i', 'NONE', '-n', '-l', here .. '/exit_child.lua' }, {
      text = true,
      stdout = function(_, data)
        said = said .. (data or '')
      end,
      stderr = false,
      env = {
        AGENTD_BIN = AGENTD,
        AGENTD_TEST_URL = info.url,
        AGENTD_TEST_HOME = home,
        AGENTD_TEST_ROOT = uv.fs_realpath(child_root),
        AGENTD_TEST_PIDS = pids,
        AGENTD_TEST_QUIT = how == 'qall' and 'qall' or 'wait',
      },
    })
    wait_for('the other Neovim to run the command', function()
      return contains(said, '\n')
    end, 60000)
    if how == 'SIGHUP' and contains(said, 'running') then
      nvim:kill('sighup')
    end
    local res = nvim:wait(60000)
    check(contains(said, 'running'), 'the other Neovim: exit %s, %s', tostring(res.code), said)
    check(how == 'SIGHUP' or res.code == 0, 'the other Neovim: exit %s', tostring(res.code))
    local sh, child = (vim.fn.readfile(pids)[1] or ''):match('^(%d+) (%d+)$')
    check(sh and child, 'no pids')
    -- Neovim has exited: what it left is gone by now, or going (bounded poll).
    wait_killed(tonumber(sh), tonumber(child))
  end)
end

test('memory delivery is shown in the chat', function()
  -- The folder the daemon reads: `agentd memory dir ROOT`, else memory/list.
  local dir
  local res = vim.system({ AGENTD, 'memory', 'dir', root }, { text = true, env = { AGENTD_HOME = home } }):wait(20000)
  if res.code == 0 and vim.trim(res.stdout or '') ~= '' then
    dir = vim.trim(res.stdout)
  end
  local lerr, list = request('memory/list', { workspaceRoot = root })
  if not dir and not lerr and type(list) == 'table' then
    dir = list.directory
  end
  if not dir then
    skip(('no memory folder: `agentd memory dir` exited %d (%s); memory/list: %s'):format(
      res.code,
      vim.trim(res.stderr or ''):match('[^\n]*$'),
      lerr and lerr.message or 'no directory'
    ))
  end
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile({
    '---',
    'name: zebra naming',
    'description: how the project names its zebra modules',
    'type: project',
    '---',
    'Every zebra module is named after a stripe colour.',
  }, dir .. '/zebra.md')
  if not lerr then
    -- The watcher indexes the file; wait until memory/list shows it.
    local listed, pending = false, false
    wait_for('memory/list to show zebra.md', function()
      if not pending and not listed then
        pending = true
        client():request('memory/list', { workspaceRoot = root }, function(_, l)
          pending = false
          for _, d in ipairs((l or {}).docs or {}) do
            if vim.fs.basename(d.path or '') == 'zebra.md' then
              listed = true
            end
          end
        end)
      end
      return listed
    end)
  end
  seen_kinds.memory = nil
  -- A tool call gives the daemon two delivery points (user query, tool result).
  ask_and_wait('!tool read_file {"path": "a.txt"}\nhow should I name the zebra module?')
  if not seen_kinds.memory then
    skip('the daemon sent no agent/update of kind memory (memory delivery not in the daemon yet?)')
  end
  if os.getenv('AGENTD_TEST_VERBOSE') then
    out('--- chat buffer before reset ---\n' .. chat.content())
  end
  local line = chat.content():match('\n%- memory %(([^\n]*)')
  check(line and contains(line, 'zebra.md'), 'memory line not shown')
end)

test(':AgentdStatus and :AgentdMemory', function()
  local done, got, err
  agentd.status(nil, function(res, e)
    done, got, err = true, res, e
  end)
  wait_for('memory/status', function()
    return done
  end)
  if err and err.code == -32601 then
    skip('the daemon has no memory/status yet')
  end
  check(got and got.docCount ~= nil, 'memory/status result: %s', vim.inspect(got or err))
  done = false
  agentd.memory(nil, function(res, e)
    done, got, err = true, res, e
  end)
  wait_for('memory/list', function()
    return done
  end)
  check(got and got.directory, 'memory/list result: %s', vim.inspect(got or err))
  local buf = chat.find('agentd://memory')
  check(buf, 'no memory buffer')
  local lines = table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
  check(contains(lines, got.directory), 'directory not listed')
end)

test('the footer shows the context meter; :AgentdCompact draws the divider', function()
  local stop = ask_and_wait('one more turn before compacting')
  check(stop:match('context %d+ %%'), 'no context meter in the footer: %s', stop)
  local ctx = state().context
  check(ctx and ctx.window > 0 and ctx.tokens > 0, 'context: %s', vim.inspect(ctx))
  local label = agentd.context(root)
  check(label and label:match('^context %d+ %%$'), 'context(): %s', tostring(label))
  local done, res
  agentd.compact('keep the file names', nil, function(r)
    done, res = true, r
  end)
  wait_for('agent/compact', function()
    return done
  end)
  check(res and res.status == 'done' and (res.summarized or 0) > 0, 'result: %s', vim.inspect(res))
  check(contains(chat.content(), '— conversation compacted — about'), 'no divider in the chat')
  check(state().context.tokens == res.tokensAfter, 'the meter did not follow the compaction')
  wait_log('the compact request', function(e)
    return e.type == 'request' and e.purpose == 'compact'
  end)
end)

test(':AgentdReset clears the chat; :AgentdNew starts another session', function()
  local done, ok
  agentd.reset(nil, function(r)
    done, ok = true, r
  end)
  wait_for('agent/resetSession', function()
    return done
  end)
  check(ok, 'reset failed')
  check(not contains(chat.content(), 'Echo:'), 'chat not cleared')
  local before = state().session_id
  vim.cmd('AgentdNew')
  check(state().session_id == nil, 'session kept')
  ask_and_wait('fresh start')
  check(state().session_id and state().session_id ~= before, 'no new session')
  check(contains(chat.content(), 'Echo: fresh start'), 'answer after new')
end)

test('additional_directories: sent as a new session\'s additionalDirectories; the editor\'s tools reach it, a loaded session keeps it', function()
  local extra = tmp .. '/extra'
  vim.fn.mkdir(extra, 'p')
  extra = uv.fs_realpath(extra)
  vim.fn.writefile({ 'EXTRA_FACT' }, extra .. '/note.txt')
  local given
  local read_note = '!tool read_file ' .. vim.json.encode({ path = extra .. '/note.txt' })
  local ok, err = pcall(function()
    agentd.setup({
      auto_approve = approvals,
      additional_directories = function(r)
        given = r
        return { '../extra' } -- relative: the project root's
      end,
    })
    vim.cmd('AgentdNew')
    ask_and_wait(read_note)
    check(given == root, 'the function was given %s', tostring(given))
    check(contains(chat.content(), 'Tool result received: 1  EXTRA_FACT'), 'read_file in the extra folder')
    local sid = state().session_id
    local _, listed = request('agent/listSessions', { workspaceRoot = root })
    local mine = vim.iter(listed.sessions):find(function(s)
      return s.sessionId == sid
    end)
    check(mine and vim.deep_equal(mine.additionalDirectories, { extra }), 'listed: %s', vim.inspect(mine))
    -- Without the option a new session has no folder beside its root.
    agentd.setup({ auto_approve = approvals })
    vim.cmd('AgentdNew')
    ask_and_wait(read_note)
    check(contains(chat.content(), 'is outside the workspace'), 'a new session without the option read it')
    -- The saved session, loaded again, has its folder still (the daemon says so).
    local loaded
    agentd.load_session(sid, { root = root }, function(r)
      loaded = r
    end)
    wait_for('the load', function()
      return loaded ~= nil
    end)
    check(vim.deep_equal(loaded.additionalDirectories, { extra }), 'load reply: %s', vim.inspect(loaded))
    ask_and_wait(read_note)
    check(contains(chat.content(), 'Tool result received: 1  EXTRA_FACT'), 'read_file after the load')
    -- A list is taken as it is; a bad value is reported and nothing sent.
    agentd.setup({ auto_approve = approvals, additional_directories = { extra } })
    vim.cmd('AgentdNew')
    ask_and_wait(read_note)
    check(contains(chat.content(), 'Tool result received: 1  EXTRA_FACT'), 'the list form')
  end)
  agentd.setup({ auto_approve = approvals })
  vim.cmd('AgentdNew')
  if not ok then
    error(err, 0)
  end
end)

test(':AgentdMode picks a mode with vim.ui.select; auto-edit applies an edit without asking', function()
  ask_and_wait('a turn so the session exists')
  if not state().mode then
    check_hidden('AgentdMode', 'offers no session modes')
    check(#vim.fn.getcompletion('AgentdMode ', 'cmdline') == 0, 'modes completed')
    skip('the daemon offers no session modes (checked: :AgentdMode says so and offers none)')
  end
  check(state().mode == 'code', 'initial mode: %s', tostring(state().mode))
  local done, res
  local offered = with_select(item_with('id', 'ask'), function()
    agentd.set_mode(nil, nil, function(r)
      done, res = true, r
    end)
    wait_for('agent/setMode', function()
      return done
    end)
  end)
  check(res and res.mode == 'ask', 'result: %s', vim.inspect(res))
  check(state().mode == 'ask', 'mode: %s', tostring(state().mode))
  local ids = vim.tbl_map(function(m)
    return m.id
  end, offered[1].items)
  check(vim.deep_equal(ids, { 'ask', 'code', 'auto-edit' }), 'modes offered: %s', vim.inspect(ids))
  check(contains(offered[1].opts.format_item(offered[1].items[2]), '(current)'), 'the current mode is not marked')
  wait_for('the mode note', function()
    return contains(chat.content(), '_mode: Ask_')
  end)
  check(vim.deep_equal(vim.fn.getcompletion('AgentdMode a', 'cmdline'), { 'ask', 'auto-edit' }), 'completion: %s', vim.inspect(vim.fn.getcompletion('AgentdMode a', 'cmdline')))
  -- Ask: the model is offered no edits, and one it calls is refused.
  vim.fn.writefile({ 'mode x' }, root .. '/m.txt')
  ask_and_wait('!tool edit_file {"path": "m.txt", "old_text": "x", "new_text": "y"}')
  local mbuf = chat.find(root .. '/m.txt')
  check(not mbuf or api.nvim_buf_get_lines(mbuf, 0, -1, false)[1] == 'mode x', 'ask mode edited the file')
  check(not contains(chat.content():match('.*## You\n(.*)$'), '— completed'), 'an edit ran in the Ask mode')
  -- Auto-edit: the edit applies without a question, even with approval off.
  vim.cmd('AgentdMode auto-edit')
  wait_for('auto-edit', function()
    return state().mode == 'auto-edit'
  end)
  approvals.edit_file = nil
  local asked = with_select(function()
    return nil
  end, function()
    ask_and_wait('!tool edit_file {"path": "m.txt", "old_text": "x", "new_text": "y"}')
  end)
  approvals.edit_file = true
  check(#asked == 0, 'auto-edit asked: %s', asked[1] and asked[1].opts.prompt or '')
  mbuf = chat.find(root .. '/m.txt')
  check(mbuf and api.nvim_buf_get_lines(mbuf, 0, -1, false)[1] == 'mode y', 'auto-edit did not edit')
  vim.cmd('AgentdMode code')
  wait_for('code', function()
    return state().mode == 'code'
  end)
end)

test(':AgentdModel switches the model the next request uses', function()
  if not state().model then
    check_hidden('AgentdModel', 'offers no session modes or models')
    check(#vim.fn.getcompletion('AgentdModel ', 'cmdline') == 0, 'models completed')
    skip('the daemon offers no model choice (checked: :AgentdModel says so and offers none)')
  end
  local offered = with_select(item_with('id', 'test-2'), function()
    vim.cmd('AgentdModel')
    wait_for('agent/setModel', function()
      return state().model == 'test-2'
    end)
  end)
  local ids = vim.tbl_map(function(m)
    return m.id
  end, offered[1].items)
  check(vim.deep_equal(ids, { 'test', 'test-2' }), 'models offered: %s', vim.inspect(ids))
  check(contains(chat.content(), '_model: test-2_'), 'no model note')
  ask_and_wait('which model answers?')
  wait_log('a request to test-2', function(e)
    return e.type == 'request' and e.purpose == 'main' and type(e.body) == 'table' and e.body.model == 'test-2'
  end)
  vim.cmd('AgentdModel test')
  wait_for('model test', function()
    return state().model == 'test'
  end)
end)

test('the plan is a section of the turn, redrawn as the model updates it', function()
  seen_kinds.plan = nil
  ask_and_wait(table.concat({
    '!tool update_plan {"entries": [{"content": "read the parser", "priority": "high", "status": "in_progress"}, {"content": "fix it", "priority": "medium", "status": "pending"}]}',
    '!tool update_plan {"entries": [{"content": "read the parser", "priority": "high", "status": "completed"}, {"content": "fix it", "priority": "medium", "status": "in_progress"}, {"content": "run the tests", "priority": "low", "status": "pending"}]}',
  }, '\n'))
  if not seen_kinds.plan then
    skip('the daemon sent no agent/update of kind plan (no update_plan tool)')
  end
  local turn_text = chat.content():match('.*## You\n(.*)$')
  local _, plans = turn_text:gsub('%*%*Plan%*%*', '')
  check(plans == 1, 'expected one plan section in the turn, got %d', plans)
  check(contains(turn_text, '**Plan**\n\n- [x] read the parser · high\n- [-] **fix it** (in progress)\n- [ ] run the tests · low\n'), 'plan section:\n%s', turn_text)
  local answer = turn_text:match('## agentd\n(.*)$')
  check(not contains(answer, 'update_plan'), 'the plan is shown as a tool call')
  check(contains(answer, '- [ ] run the tests · low\n\nTool result received'), 'the answer is glued to the plan:\n%s', answer)
  check(state().plan and #state().plan == 3, 'plan kept: %s', vim.inspect(state().plan))
end)

test(':AgentdAsk completes and runs slash commands', function()
  if state().commands == false then
    check(#vim.fn.getcompletion('AgentdAsk /', 'cmdline') == 0, 'commands completed')
    -- /compact is not sent to the model as text: agent/compact runs instead
    -- (or says why it cannot).
    local before = #chat.content()
    vim.cmd('AgentdAsk /compact keep the file names')
    wait_for('the compaction note', function()
      return contains(chat.content():sub(before + 1), 'compact')
    end)
    check(not contains(chat.content(), '## You\n\n/compact'), '/compact was sent as a prompt')
    skip('the daemon has no slash commands (agent/listCommands is -32601; checked: none completed, /compact ran agent/compact)')
  end
  wait_for('agent/listCommands', function()
    return type(state().commands) == 'table'
  end)
  local names = vim.fn.getcompletion('AgentdAsk /', 'cmdline')
  check(vim.tbl_contains(names, '/compact') and vim.tbl_contains(names, '/memory'), 'completion: %s', vim.inspect(names))
  check(vim.deep_equal(vim.fn.getcompletion('AgentdAsk /me', 'cmdline'), { '/memory' }), '/me')
  check(#vim.fn.getcompletion('AgentdAsk why /', 'cmdline') == 0, 'completes a slash inside a prompt')
  vim.cmd('AgentdAsk /memory')
  local stop = wait_turn()
  check(stop:match('^end_turn'), 'stop: %s', stop)
  local answer = chat.content():match('## You\n\n/memory\n\n## agentd\n\n(.-)\n\n_end_turn')
  check(answer and contains(answer, home), '/memory answer: %s', tostring(answer))
  vim.cmd('AgentdAsk /compact keep the file names')
  stop = wait_turn()
  check(stop:match('^end_turn'), 'stop: %s', stop)
  local text = chat.content():match('.*## You\n(.*)$')
  check(contains(text, '— conversation compacted —'), 'no divider after /compact: %s', text)
  check(not contains(text, '_compaction failed'), '/compact failed: %s', text)
end)

test(':AgentdSessions forks a saved session, and deletes one once confirmed', function()
  vim.cmd('AgentdNew')
  ask_and_wait('remember the word heron')
  local sid = state().session_id
  local done, res, err
  local function pick(chooser)
    done, res, err = false, nil, nil
    with_select(chooser, function()
      agentd.sessions(nil, function(r, e)
        done, res, err = true, r, e
      end)
      wait_for(':AgentdSessions', function()
        return done
      end)
    end)
  end
  pick(session_chooser(sid, 'fork'))
  check(res, 'fork failed: %s', tostring(err))
  local fork = state().session_id
  check(fork and fork ~= sid, 'not in the fork: %s', tostring(fork))
  check(contains(chat.content(), 'Echo: remember the word heron'), 'the fork shows no history:\n%s', chat.content())
  -- The fork goes on with the source's history.
  ask_and_wait('what was the word?')
  wait_log('a request of the fork with the history', function(e)
    local body = type(e.body) == 'table' and vim.json.encode(e.body.messages or {}) or ''
    return e.type == 'request' and contains(body, 'what was the word?') and contains(body, 'heron')
  end)

  -- Deleting asks first: "Keep" leaves the session.
  pick(session_chooser(fork, 'delete', 'Keep'))
  check(err == 'kept', 'not kept: %s', tostring(err))
  local _, listed = request('agent/listSessions', { workspaceRoot = root })
  local ids = vim.tbl_map(function(x)
    return x.sessionId
  end, listed.sessions)
  check(vim.tbl_contains(ids, fork), 'the kept fork is gone: %s', vim.inspect(ids))
  pick(session_chooser(fork, 'delete', 'Delete'))
  check(res and res.deleted == true, 'not deleted: %s %s', vim.inspect(res), tostring(err))
  check(state().session_id == nil, 'the chat still holds the deleted session')
  _, listed = request('agent/listSessions', { workspaceRoot = root })
  ids = vim.tbl_map(function(x)
    return x.sessionId
  end, listed.sessions)
  check(not vim.tbl_contains(ids, fork) and vim.tbl_contains(ids, sid), 'listed: %s', vim.inspect(ids))
  -- The next prompt starts a new session.
  ask_and_wait('a fresh start')
  check(state().session_id and state().session_id ~= fork, 'no new session')
end)

test(':AgentdSessions loads a saved session picked in vim.ui.select', function()
  ask_and_wait('remember the word pelican')
  local sid = state().session_id
  vim.cmd('AgentdNew')
  ask_and_wait('another session entirely')
  local other = state().session_id
  check(other ~= sid, 'no new session')
  local done, res
  local offered = with_select(session_chooser(sid, 'open'), function()
    agentd.sessions(nil, function(r)
      done, res = true, r
    end)
    wait_for('agent/loadSession', function()
      return done
    end)
  end)
  check(res, 'load failed')
  local actions = vim.tbl_map(offered[2].opts.format_item, offered[2].items)
  check(vim.deep_equal(actions, { 'Open', 'Fork: a new session from a copy of it', 'Delete…' }), 'actions: %s', vim.inspect(actions))
  local shown = vim.tbl_map(offered[1].opts.format_item, offered[1].items)
  check(#shown >= 2, 'sessions offered: %s', vim.inspect(shown))
  check(vim.iter(shown):any(function(l)
    return contains(l, '(current)')
  end), 'the current session is not marked: %s', vim.inspect(shown))
  check(state().session_id == sid, 'session %s, expected %s', tostring(state().session_id), sid)
  local text = chat.content()
  check(contains(text, '## You\n\nremember the word pelican\n\n## agentd\n\nEcho: remember the word pelican'), 'history not replayed:\n%s', text)
  check(not contains(text, 'another session entirely'), 'the other session is shown')
  check(contains(text, '_session loaded'), 'no loaded note')
  -- The next prompt goes on in the loaded session: the model sees its history.
  ask_and_wait('what was the word?')
  wait_log('a request with the loaded history', function(e)
    if e.type ~= 'request' or type(e.body) ~= 'table' then
      return false
    end
    local body = vim.json.encode(e.body.messages or {})
    return contains(body, 'what was the word?') and contains(body, 'pelican')
  end)
end)

-- --- recorded messages -------------------------------------------------------------
-- tests/recorded/daemon_messages.json holds messages recorded from the daemons
-- that add MCP (issue 16) and modes and plans (issue 17). They are replayed
-- into the plugin's handlers during a real prompt of the daemon under test, so
-- the plugin's side is tested whichever daemon runs.
local RECORDED = vim.json.decode(table.concat(vim.fn.readfile(here .. '/recorded/daemon_messages.json'), '\n'))

--- The params of a recorded message, for the live session `sid`.
local function recorded_params(name, sid, fields)
  local params = vim.deepcopy(RECORDED[name].params)
  params.sessionId = sid
  for k, v in pairs(fields or {}) do
    if params.update then
      params.update[k] = v
    else
      params[k] = v
    end
  end
  return params
end

local function feed(name, sid, fields)
  agentd.handlers['agent/update'](nil, recorded_params(name, sid, fields), { method = 'agent/update' })
end

--- agent/requestPermission as Neovim's RPC layer calls it: in a coroutine,
--- the reply being what the handler returns. Returns a function giving the
--- result once there is one.
local function permission(params)
  local result
  coroutine.wrap(function()
    result = agentd.handlers['agent/requestPermission'](nil, params, { method = 'agent/requestPermission' })
  end)()
  return function()
    return result
  end
end

test('recorded: an MCP card naming its server, the permission question (allowed, then withdrawn by a cancel), a plan redrawn in place, mode notes', function()
  check(agentd.ask('!delay 0.05\n!chunks 2000') ~= nil, 'ask refused')
  wait_for('the stream', function()
    return contains(chat.content(), 'w2')
  end)
  local sid = state().session_id
  feed('mcp_tool_call', sid)
  check(contains(chat.content(), '- tool **echo** `{"text":"hi"}` · MCP tst — running'), 'card:\n%s', chat.content():match('[^\n]*MCP[^\n]*') or '')
  local result
  local offered = with_select(item_with('kind', 'allow_always'), function()
    result = permission(recorded_params('mcp_permission', sid))
    check(contains(chat.content(), '· MCP tst — awaiting permission'), 'no awaiting status')
    wait_for('the answer', function()
      return result() ~= nil
    end)
  end)
  check(vim.deep_equal(result(), { outcome = { outcome = 'selected', optionId = 'allow_always' } }), 'answer: %s', vim.inspect(result()))
  check(#offered == 1, 'questions: %d', #offered)
  local q = offered[1].opts.prompt
  check(q == 'agentd wants to call echo on the MCP server tst (Echo a text back (a tool with side effects, as far as agentd knows).):\n  {"text":"hi"}\nAllow it?', 'question: %s', q)
  check(contains(chat.content(), '· MCP tst — running'), 'not running after the allow')
  feed('mcp_tool_call_update', sid)
  check(contains(chat.content(), '- tool **echo** `{"text":"hi"}` · MCP tst — completed'), 'not completed')
  -- auto_approve answers by the model's name of the tool, without a question.
  approvals['mcp__tst__echo'] = false
  offered = with_select(function() end, function()
    result = permission(recorded_params('mcp_permission', sid, { toolCallId = 'call_r2' }))
  end)
  approvals['mcp__tst__echo'] = nil
  check(#offered == 0, 'asked despite auto_approve')
  check(vim.deep_equal(result(), { outcome = { outcome = 'selected', optionId = 'reject_once' } }), 'auto_approve answer: %s', vim.inspect(result()))
  -- The plan: one section, redrawn.
  feed('plan_first', sid)
  feed('plan_second', sid)
  local turn_text = chat.content():match('.*## You\n(.*)$')
  local _, plans = turn_text:gsub('%*%*Plan%*%*', '')
  check(plans == 1, 'plan sections: %d', plans)
  check(contains(turn_text, '**Plan**\n\n- [x] read the parser · high\n- [-] **fix it** (in progress)\n- [ ] run the tests · low\n'), 'plan:\n%s', turn_text)
  -- Mode notes, in the turn.
  feed('mode_ask', sid)
  feed('mode_code', sid)
  turn_text = chat.content():match('.*## You\n(.*)$')
  check(turn_text:match('\n%- mode: [Aa]sk\n') and turn_text:match('\n%- mode: [Cc]ode'), 'mode notes:\n%s', turn_text)
  -- A question open when the prompt is cancelled is answered `cancelled`,
  -- and its picker is closed.
  feed('mcp_tool_call', sid, { toolCallId = 'call_r3' })
  local pickers = with_float_picker(function()
    result = permission(recorded_params('mcp_permission', sid, { toolCallId = 'call_r3' }))
    check(result() == nil, 'answered without the user')
    agentd.cancel()
    wait_for('the withdrawal', function()
      return result() ~= nil
    end)
  end)
  check(vim.deep_equal(result(), { outcome = { outcome = 'cancelled' } }), 'withdrawn answer: %s', vim.inspect(result()))
  check(#pickers == 1 and not api.nvim_win_is_valid(pickers[1]), 'the picker stayed open')
  -- One that comes after the cancel is answered `cancelled` at once.
  offered = with_select(item_with('kind', 'allow_once'), function()
    result = permission(recorded_params('mcp_permission', sid, { toolCallId = 'call_r4' }))
  end)
  check(#offered == 0 and vim.deep_equal(result(), { outcome = { outcome = 'cancelled' } }), 'asked after the cancel: %s', vim.inspect(result()))
  check(contains(chat.content(), '- tool **echo** `{"text":"hi"}` · MCP tst — cancelled'), 'card not cancelled')
  local stop = ask_and_wait('after the recorded messages')
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

test('recorded: the confirm hook asks the MCP permission questions too (yes allows once, no rejects), and is told when one is withdrawn', function()
  check(agentd.ask('!delay 0.05\n!chunks 2000') ~= nil, 'ask refused')
  wait_for('the stream', function()
    return contains(chat.content(), 'w2')
  end)
  local sid = state().session_id
  local asked, answer, closed = {}, nil, 0
  -- A hook with its own question: answers later, as a real one would, and
  -- returns what takes the question back.
  agentd.config.confirm = function(name, args, q, cb)
    asked[#asked + 1] = { name = name, args = args, question = q }
    answer = cb
    return function()
      closed = closed + 1
    end
  end
  local results = {}
  local ok, err = pcall(function()
    local offered = with_select(item_with('kind', 'allow_always'), function()
      for i, yes in ipairs({ true, false }) do
        local id = 'call_h' .. i
        feed('mcp_tool_call', sid, { toolCallId = id })
        answer = nil
        local result = permission(recorded_params('mcp_permission', sid, { toolCallId = id }))
        wait_for('the hook asked', function()
          return answer ~= nil
        end)
        check(result() == nil, 'answered before the hook')
        check(contains(chat.content(), '· MCP tst — awaiting permission'), 'no awaiting status')
        answer(yes)
        wait_for('the answer', function()
          return result() ~= nil
        end)
        results[i] = result()
      end
    end)
    check(#offered == 0, 'the built-in picker asked %d questions beside the hook', #offered)
    check(#asked == 2, 'the hook asked %d questions', #asked)
    check(asked[1].name == 'mcp__tst__echo', 'name: %s', tostring(asked[1].name))
    check(vim.deep_equal(asked[1].args, { text = 'hi' }), 'args: %s', vim.inspect(asked[1].args))
    local q = asked[1].question
    check(q == 'agentd wants to call echo on the MCP server tst (Echo a text back (a tool with side effects, as far as agentd knows).):\n  {"text":"hi"}\nAllow it?', 'question: %s', q)
    check(vim.deep_equal(results[1], { outcome = { outcome = 'selected', optionId = 'allow_once' } }), 'yes: %s', vim.inspect(results[1]))
    check(vim.deep_equal(results[2], { outcome = { outcome = 'selected', optionId = 'reject_once' } }), 'no: %s', vim.inspect(results[2]))
    check(contains(chat.content(), '· MCP tst — rejected'), 'the refused call is not shown rejected')
    check(closed == 0, 'a question answered was taken back')
    -- Open when the prompt is cancelled: answered `cancelled`, the hook's
    -- question taken back once, and its late yes answers nothing.
    feed('mcp_tool_call', sid, { toolCallId = 'call_h3' })
    answer = nil
    local result = permission(recorded_params('mcp_permission', sid, { toolCallId = 'call_h3' }))
    wait_for('the hook asked', function()
      return answer ~= nil
    end)
    agentd.cancel()
    wait_for('the withdrawal', function()
      return result() ~= nil
    end)
    check(vim.deep_equal(result(), { outcome = { outcome = 'cancelled' } }), 'withdrawn answer: %s', vim.inspect(result()))
    check(closed == 1, 'the close function was called %d times', closed)
    answer(true)
    check(vim.deep_equal(result(), { outcome = { outcome = 'cancelled' } }), 'the late yes changed the answer')
    check(closed == 1, 'closed again by the late answer')
  end)
  agentd.config.confirm = nil
  check(ok, tostring(err))
  local stop = ask_and_wait('after the hook answered the permission questions')
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

-- (Another root from here on: the commands above act on `root`.)
--- The repository's test MCP server (FastMCP), run by the daemon's Python:
--- that Python and the server's script (the test is skipped without them).
local function test_mcp_server()
  local server_py = vim.fs.normalize(plugin_root .. '/../../tests/mcp/server.py')
  local python = vim.fs.dirname(vim.fn.exepath(AGENTD)) .. '/python'
  if vim.fn.filereadable(server_py) == 0 or vim.fn.executable(python) == 0 then
    skip('no tests/mcp/server.py or no python beside ' .. AGENTD)
  end
  local probe = vim.system({ python, '-c', 'import mcp' }):wait(60000)
  if probe.code ~= 0 then
    skip('the MCP SDK is not installed beside ' .. AGENTD)
  end
  return python, server_py
end

--- The set-up of the MCP tests: a fresh root `tmp/NAME` (a git repository),
--- the daemon given the test MCP server `tst`; returns the root's real path
--- and `ask_here(prompt)`, which asks there, waits for the turn to end and
--- returns how it stopped.
local function mcp_root(name)
  local python, server_py = test_mcp_server()
  local root = tmp .. '/' .. name
  vim.fn.mkdir(root .. '/.git', 'p')
  root = uv.fs_realpath(root)
  -- enabled: a test before may have turned `tst` off (vim.lsp.config merges
  -- tables). startupWait: the first prompt waits for the server's tools (a
  -- slow machine may take seconds to import the SDK), as the daemon documents.
  vim.lsp.config('agentd', {
    init_options = { mcpServers = { tst = { enabled = true, command = python, args = { server_py } } }, mcp = { startupWait = 120 } },
  })
  local function ask_here(prompt)
    check(agentd.ask(prompt, { root = root }) ~= nil, 'ask refused')
    wait_for('the turn to end', function()
      local s = agentd.info(root) or {}
      return s.client_id ~= nil and not s.running
    end)
    return (agentd.info(root) or {}).last_stop or ''
  end
  return root, ask_here
end

-- The end of a test on an `mcp_root`: its server turned off for the tests
-- after it (vim.lsp.config merges tables: the entry stays, disabled), its
-- client stopped, and the test's error (pcall's `ok`, `err`) raised again.
local function mcp_done(root, ok, err)
  vim.lsp.config('agentd', { init_options = { mcpServers = { tst = { enabled = false } } } })
  local c = agentd.info(root) and vim.lsp.get_client_by_id(agentd.info(root).client_id)
  if c then
    c:stop()
  end
  if not ok then
    error(err, 0)
  end
end

test('MCP: permission asked with vim.ui.select (allow, reject, cancel), the server named on the card, :AgentdStatus lists it', function()
  local mroot, ask_here = mcp_root('mcp')
  local ok, err = pcall(function()
    -- A tool with side effects: asked, allowed once.
    local offered = with_select(item_with('kind', 'allow_once'), function()
      ask_here('!tool mcp__tst__echo {"text": "hi"}')
    end)
    local caps = vim.tbl_get(vim.lsp.get_client_by_id(agentd.info(mroot).client_id).server_capabilities, 'experimental', 'agentd')
    if #offered == 0 and not (caps and caps.mcp) then
      skip('the daemon has no MCP servers (no `mcp` capability)')
    end
    check(#offered == 1, 'permission questions: %d', #offered)
    local q = offered[1].opts.prompt
    check(contains(q, 'agentd wants to call echo on the MCP server tst'), 'question: %s', q)
    check(contains(q, '{"text":"hi"}'), 'arguments not shown: %s', q)
    local names = vim.tbl_map(offered[1].opts.format_item, offered[1].items)
    check(vim.deep_equal(names, { 'Allow once', 'Always allow in this session', 'Reject' }), 'options: %s', vim.inspect(names))
    local text = chat.content()
    check(contains(text, '- tool **echo** `{"text":"hi"}` · MCP tst — completed'), 'tool card:\n%s', text)
    check(contains(text, 'Tool result received: echo: hi'), 'result not fed back')
    -- Rejected: the call fails and the model is told.
    offered = with_select(item_with('kind', 'reject_once'), function()
      ask_here('!tool mcp__tst__echo {"text": "no"}')
    end)
    check(#offered == 1, 'not asked')
    text = chat.content():match('.*## You\n(.*)$')
    check(contains(text, '· MCP tst — failed'), 'rejected card:\n%s', text)
    check(not contains(text, 'echo: no'), 'the rejected call ran')
    -- Read-only: no question.
    offered = with_select(function() end, function()
      ask_here('!tool mcp__tst__add {"a": 2, "b": 3}')
    end)
    check(#offered == 0, 'asked about a read-only tool')
    check(contains(chat.content(), 'Tool result received: 5'), 'add result')
    -- A confirm hook asks instead of the picker: yes runs the call.
    local hooked = {}
    agentd.config.confirm = function(name, _, _, cb)
      hooked[#hooked + 1] = name
      vim.schedule(function()
        cb(true)
      end)
    end
    local hook_ok, hook_err = pcall(function()
      offered = with_select(function() end, function()
        ask_here('!tool mcp__tst__echo {"text": "by the hook"}')
      end)
    end)
    agentd.config.confirm = nil
    check(hook_ok, tostring(hook_err))
    check(#offered == 0, 'the picker asked beside the hook')
    check(vim.deep_equal(hooked, { 'mcp__tst__echo' }), 'the hook asked: %s', vim.inspect(hooked))
    check(contains(chat.content(), 'Tool result received: echo: by the hook'), 'the call the hook allowed did not run')
    -- Cancelled while the question is open: withdrawn (its picker closed),
    -- and the session goes on.
    local pickers = with_float_picker(function()
      check(agentd.ask('!tool mcp__tst__echo {"text": "later"}', { root = mroot }) ~= nil, 'ask refused')
      wait_for('the question', function()
        return contains(chat.content(), '· MCP tst — awaiting permission')
      end)
      agentd.cancel({ root = mroot })
    end)
    check(#pickers == 1, 'not asked before the cancel')
    check(not api.nvim_win_is_valid(pickers[1]), 'the picker stayed open after the cancel')
    local stop = ask_here('after the withdrawn question')
    check(stop:match('^end_turn'), 'stop: %s', stop)
    -- :AgentdStatus lists the server.
    local done, lines
    agentd.status({ root = mroot }, function(_, _, l)
      done, lines = true, l
    end)
    wait_for(':AgentdStatus', function()
      return done
    end)
    local all = table.concat(lines or {}, '\n')
    check(all:match('\n  tst: ready %(stdio, %d+ tools'), 'status:\n%s', all)
  end)
  mcp_done(mroot, ok, err)
end)

test('MCP: a permission question the daemon withdraws (no answer in time) has its picker closed', function()
  local python, server_py = test_mcp_server()
  local troot = tmp .. '/mcp-timeout'
  vim.fn.mkdir(troot .. '/.git', 'p')
  troot = uv.fs_realpath(troot)
  -- A daemon for this root that gives the user one second to answer: then
  -- it sends `$/cancelRequest` for its question and refuses the call.
  vim.lsp.config('agentd', {
    init_options = {
      mcpServers = { tst = { enabled = true, command = python, args = { server_py } } },
      mcp = { startupWait = 120, permissionTimeout = 1 },
    },
  })
  local pickers
  local ok, err = pcall(function()
    pickers = with_float_picker(function()
      check(agentd.ask('!tool mcp__tst__echo {"text": "unanswered"}', { root = troot }) ~= nil, 'ask refused')
      wait_for('the turn to end', function()
        local s = agentd.info(troot) or {}
        return s.client_id ~= nil and not s.running
      end)
    end)
  end)
  vim.lsp.config('agentd', { init_options = { mcpServers = { tst = { enabled = false } }, mcp = { permissionTimeout = 300 } } })
  local c = agentd.info(troot) and vim.lsp.get_client_by_id(agentd.info(troot).client_id)
  if c then
    c:stop()
  end
  check(ok, tostring(err))
  local caps = c and vim.tbl_get(c.server_capabilities, 'experimental', 'agentd')
  if #pickers == 0 and not (caps and caps.mcp) then
    skip('the daemon has no MCP servers (no `mcp` capability)')
  end
  check(#pickers == 1, 'permission questions: %d', #pickers)
  check(not api.nvim_win_is_valid(pickers[1]), 'the picker stayed open after the daemon withdrew its question')
  local text = chat.content():match('.*## You\n(.*)$')
  check(contains(text, '· MCP tst — failed'), 'card:\n%s', text)
  check(not contains(text, 'echo: unanswered'), 'the unanswered call ran')
  local stop = (agentd.info(troot) or {}).last_stop or ''
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

--- Run body() with vim.ui.input replaced by answer(opts) -> the text (nil:
--- dismissed), answered on the next tick. Returns the prompts it was given.
local function with_input(answer, body)
  local real_input = vim.ui.input
  local prompts = {}
  vim.ui.input = function(opts, cb)
    prompts[#prompts + 1] = opts.prompt
    local text = answer(opts)
    vim.schedule(function()
      cb(text)
    end)
  end
  local ok, err = pcall(body)
  vim.ui.input = real_input
  if not ok then
    error(err, 0)
  end
  return prompts
end

--- A chooser answering each select from `labels` in turn (by the label it
--- shows; false: dismissed).
local function choose_labels(labels)
  local n = 0
  return function(items, opts)
    n = n + 1
    local want = labels[n]
    for _, it in ipairs(want and items or {}) do
      if (opts.format_item or tostring)(it) == want then
        return it
      end
    end
    return nil
  end
end

test('MCP: agent/elicit asked with vim.ui.select and vim.ui.input (a typed, checked form; a URL opened; dismissal and cancel answer cancel)', function()
  local eroot, ask_here = mcp_root('mcp-elicit')
  --- What the MCP server got: the `ask` tool's JSON result of the last turn.
  local function answer()
    local text = chat.content():match('.*## You\n(.*)$') or ''
    local json = text:match('Tool result received: (%b{})')
    check(json, 'no tool result:\n%s', text)
    return vim.json.decode(json)
  end
  local real_open = vim.ui.open
  local opened = {}
  vim.ui.open = function(url)
    opened[#opened + 1] = url
  end
  local ok, err = pcall(function()
    -- The form: the required account first, then by name: confirm, note,
    -- ratio, rows, tags (a multi-select: each pick toggles, Done ends).
    local prompts
    local offered = with_select(choose_labels({ 'work', 'Yes', '[ ] a', '[ ] b', 'Done' }), function()
      local inputs = { ('x'):rep(21), 'hi', '', '0', '2.5', '3' }
      prompts = with_input(function()
        return table.remove(inputs, 1)
      end, function()
        ask_here('!tool mcp__tst__ask {"kind": "form"}')
      end)
    end)
    local c = vim.lsp.get_client_by_id(agentd.info(eroot).client_id)
    local caps = vim.tbl_get(c.server_capabilities, 'experimental', 'agentd')
    if #offered == 0 and not (caps and caps.mcp) then
      skip('the daemon has no MCP servers (no `mcp` capability)')
    end
    check(vim.deep_equal(c.config.init_options.elicitation, { form = true, url = true }), 'init_options: %s', vim.inspect(c.config.init_options))
    check(#offered == 5, 'selects: %d', #offered)
    check(contains(offered[1].opts.prompt, 'tst: Which account? (1/6) Account'), 'first question: %s', offered[1].opts.prompt)
    check(vim.deep_equal(vim.tbl_map(offered[1].opts.format_item, offered[1].items), { 'personal', 'work' }), 'account choices')
    check(vim.deep_equal(vim.tbl_map(offered[2].opts.format_item, offered[2].items), { 'Yes', 'No', '(skip)' }), 'boolean choices')
    check(#prompts == 6, 'inputs: %s', vim.inspect(prompts))
    check(contains(prompts[2], 'at most 20 characters'), 'note re-asked: %s', prompts[2])
    check(contains(prompts[3], 'ratio [optional]'), 'ratio: %s', prompts[3])
    check(contains(prompts[5], 'at least 1') and contains(prompts[6], 'a whole number is required'), 'rows re-asked: %s', vim.inspect(prompts))
    local got = answer()
    check(got.action == 'accept', 'action: %s', vim.inspect(got))
    check(
      vim.deep_equal(got.content, { account = 'work', confirm = true, note = 'hi', rows = 3, tags = { 'a', 'b' } }),
      'content: %s',
      vim.inspect(got.content)
    )
    -- Dismissing the first step answers cancel; nothing more is asked.
    prompts = nil
    offered = with_select(function() end, function()
      prompts = with_input(function()
        return 'never'
      end, function()
        ask_here('!tool mcp__tst__ask {"kind": "form"}')
      end)
    end)
    check(#offered == 1 and #prompts == 0, 'asked after the dismissal: %d selects, %d inputs', #offered, #prompts)
    check(answer().action == 'cancel', 'dismissed: %s', vim.inspect(answer()))
    -- A URL: Open hands it to vim.ui.open; the server's completion is noted.
    offered = with_select(choose_labels({ 'Open' }), function()
      ask_here('!tool mcp__tst__ask {"kind": "url"}')
    end)
    check(#offered == 1 and contains(offered[1].opts.prompt, 'tst asks you to open https://example.com/sign-in?state=1'), 'url question: %s', offered[1] and offered[1].opts.prompt)
    check(vim.deep_equal(opened, { 'https://example.com/sign-in?state=1' }), 'opened: %s', vim.inspect(opened))
    check(answer().action == 'accept', 'url: %s', vim.inspect(answer()))
    check(contains(chat.content(), 'the page you opened for it is done'), 'no completion note')
    -- Decline opens nothing.
    with_select(choose_labels({ 'Decline' }), function()
      ask_here('!tool mcp__tst__ask {"kind": "url"}')
    end)
    check(#opened == 1, 'opened after Decline')
    check(answer().action == 'decline', 'declined: %s', vim.inspect(answer()))
    -- Cancelled while the form is open: its picker is closed, the session goes on.
    local pickers = with_float_picker(function(wins)
      check(agentd.ask('!tool mcp__tst__ask {"kind": "form"}', { root = eroot }) ~= nil, 'ask refused')
      wait_for('the question', function()
        return #wins == 1
      end)
      check(contains(chat.content(), '· MCP tst — asking you'), 'no asking status:\n%s', chat.content())
      agentd.cancel({ root = eroot })
    end)
    check(#pickers == 1, 'questions before the cancel: %d', #pickers)
    check(not api.nvim_win_is_valid(pickers[1]), 'the picker stayed open after the cancel')
    ask_here('after the withdrawn question')
    local stop = (agentd.info(eroot) or {}).last_stop or ''
    check(stop:match('^end_turn'), 'stop: %s', stop)
  end)
  vim.ui.open = real_open
  mcp_done(eroot, ok, err)
end)

-- Another root, as the tests below: the tests above share `root`'s session.
test('Neovim\'s workspace folders of the agentd client go beside its root as additionalDirectories, merged with the option', function()
  local multi = tmp .. '/multi'
  vim.fn.mkdir(multi .. '/.git', 'p')
  multi = uv.fs_realpath(multi)
  local function folder(name, fact)
    local dir = tmp .. '/' .. name
    vim.fn.mkdir(dir, 'p')
    vim.fn.writefile({ fact }, dir .. '/note.txt')
    return uv.fs_realpath(dir)
  end
  local lib, both, opt = folder('multi-lib', 'LIB_FACT'), folder('multi-both', 'BOTH_FACT'), folder('multi-opt', 'OPT_FACT')
  local gone = tmp .. '/multi-gone'
  local function wf(dir)
    return { uri = vim.uri_from_fname(dir), name = dir }
  end
  local saved = vim.deepcopy(vim.lsp.config._configs.agentd)
  -- The root is not first: it stays the session's root all the same.
  vim.lsp.config('agentd', { workspace_folders = { wf(lib), wf(multi), wf(gone), wf(both) } })
  agentd.setup({ auto_approve = approvals, additional_directories = { opt, both } })
  local warned = {}
  local real_notify = vim.notify
  vim.notify = function(msg)
    warned[#warned + 1] = tostring(msg)
  end
  local ok, err = pcall(function()
    local read_lib = '!tool read_file ' .. vim.json.encode({ path = lib .. '/note.txt' })
    check(agentd.ask(read_lib, { root = multi }) ~= nil, 'ask refused')
    wait_for('the turn to end', function()
      local s = agentd.info(multi) or {}
      return s.client_id ~= nil and not s.running
    end)
    check(contains(chat.content(), 'Tool result received: 1  LIB_FACT'), 'read_file in a workspace folder')
    local s = agentd.info(multi)
    local c = vim.lsp.get_client_by_id(s.client_id)
    local done, listed = false, nil
    c:request('agent/listSessions', { workspaceRoot = multi }, function(_, r)
      done, listed = true, r
    end)
    wait_for('agent/listSessions reply', function()
      return done
    end)
    local mine = vim.iter(listed.sessions):find(function(x)
      return x.sessionId == s.session_id
    end)
    check(mine and vim.deep_equal(mine.additionalDirectories, { lib, both, opt }), 'listed: %s', vim.inspect(mine))
    check(vim.iter(warned):any(function(m)
      return contains(m, gone) and contains(m, 'not a directory')
    end), 'the missing folder was not reported: %s', vim.inspect(warned))
  end)
  vim.notify = real_notify
  vim.lsp.config.agentd = saved
  agentd.setup({ auto_approve = approvals })
  if not ok then
    error(err, 0)
  end
end)

test('a compaction during a turn is shown as a divider', function()
  local small = tmp .. '/small'
  vim.fn.mkdir(small .. '/.git', 'p')
  small = uv.fs_realpath(small)
  -- A daemon for this root that believes in a small window.
  vim.lsp.config('agentd', { init_options = { contextWindow = 6000 } })
  local long = string.rep('lorem-ipsum-dolor-sit-amet-consectetur-adipiscing ', 80)
  local ok, err = pcall(function()
    for i = 1, 8 do
      check(agentd.ask(('turn %d %s'):format(i, long), { root = small }) ~= nil, 'ask refused')
      wait_for('the turn to end', function()
        local s = agentd.info(small) or {}
        return s.client_id ~= nil and not s.running
      end)
      if contains(chat.content(), '— conversation compacted — about') then
        return
      end
    end
  end)
  vim.lsp.config('agentd', { init_options = { contextWindow = 0 } })
  check(ok, tostring(err))
  local text = chat.content()
  check(contains(text, '— conversation compacted — about'), 'no divider in the turn')
  check(not contains(text, 'compacting the conversation…'), 'a started line was left')
  local stop = (agentd.info(small) or {}).last_stop or ''
  check(stop:match('^end_turn'), 'stop: %s', stop)
end)

test('a daemon that cannot start ends the turn with an error', function()
  local other = tmp .. '/other'
  vim.fn.mkdir(other, 'p')
  vim.lsp.config('agentd', { cmd = { tmp .. '/no-such-agentd', 'serve' } })
  local real_notify = vim.notify
  vim.notify = function() end -- vim.lsp.start reports the spawn failure too
  local ok, err = pcall(agentd.ask, 'anyone there?', { root = other })
  vim.notify = real_notify
  vim.lsp.config('agentd', { cmd = { AGENTD, 'serve' } })
  check(ok, tostring(err))
  local s = agentd.info(other) or {}
  check(not s.running, 'turn still running')
  check(contains(s.last_stop or '', 'error: could not start'), 'stop: %s', tostring(s.last_stop))
  check(contains(chat.content(), '_error: could not start'), 'no error in the chat')
end)

test(':checkhealth agentd reports the daemon and the protocol version', function()
  vim.cmd('checkhealth agentd')
  local text = table.concat(api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  vim.cmd('tabclose')
  check(contains(text, 'daemon found'), 'daemon not found:\n%s', text)
  check(contains(text, 'protocol version 1'), 'no protocol version:\n%s', text)
end)

if os.getenv('AGENTD_TEST_VERBOSE') then
  out('--- final chat buffer ---\n' .. chat.content())
end

-- --- teardown --------------------------------------------------------------------

for _, c in ipairs(vim.lsp.get_clients({ name = 'agentd' })) do
  c:stop()
end
vim.wait(5000, function()
  return #vim.lsp.get_clients({ name = 'agentd' }) == 0
end, 20)
pcall(server.kill, server, 15)
server:wait(5000)
vim.fn.delete(tmp, 'rf')

out(('%d passed, %d failed, %d skipped'):format(counts.passed, counts.failed, counts.skipped))
os.exit(counts.failed == 0 and 0 or 1)
