-- Client tools: the daemon asks the editor to run these (an `agent/update`
-- of kind `tool_call` with executor "client") and waits for an
-- `agent/toolResult`. Every outcome is a result, refusals and failures too
-- (isError), so that the model can react instead of waiting forever.
local api = vim.api
local uv = vim.uv
local picker = require('agentd.picker')

local M = {}

-- Same caps as the daemon's own read_file (agentd/agent/tools.py), so that a
-- model sees the same thing whichever side answers.
local READ_LIMIT_BYTES = 512 * 1024

--- The tools that change something and so need the user's approval.
M.needs_approval = { edit_file = true, write_file = true, run_command = true }

---@class agentd.ToolCtx
---@field root string project root (absolute)
---@field extra_roots string[]? the session's folders beside it: absolute paths inside them are taken too
---@field config table the plugin's options
---@field cancelled fun(): boolean true once the turn was cancelled
---@field auto_approved boolean? the session's mode runs this call without asking (`autoApprove`)
---@field on_process fun(proc: vim.SystemObj)? set by M.run: the command its handler started

--- How long a command being stopped (withdrawn, or past command_timeout)
--- has to exit after SIGTERM before its process group gets SIGKILL (ms).
M.KILL_GRACE = 3000

local function fail(msg)
  error({ agentd = msg }, 0)
end

--- How long the commands still running when Neovim exits have, after
--- SIGTERM, to exit before SIGKILL (ms): Neovim waits that long at most.
M.EXIT_GRACE = 1000

--- The commands run_command started whose output has not ended yet (the
--- shell, or something it left in the background, still holds the pipes).
---@type table<vim.SystemObj, true>
local running = {}

--- Signal `proc`'s process group. A negative pid is the group; the process
--- alone if the group cannot be signalled (a `shell` that made a group of
--- its own, say).
local function signal_group(proc, sig)
  if not (proc.pid and uv.kill(-proc.pid, sig) == 0) then
    pcall(proc.kill, proc, sig)
  end
end

--- Whether any process of `proc`'s group is left. kill(-pgid, 0) answers
--- that, but counts zombies (dead, not reaped yet: an orphan whose new
--- parent, in a container, may never reap it); /proc tells them apart.
local function group_left(proc)
  if not (proc.pid and uv.kill(-proc.pid, 0) == 0) then
    return false
  end
  local dir = uv.fs_scandir('/proc')
  if not dir then
    return true
  end
  for name in uv.fs_scandir_next, dir do
    if name:match('^%d+$') then
      local f = io.open('/proc/' .. name .. '/stat', 'r')
      local stat = f and f:read('*a') or ''
      if f then
        f:close()
      end
      -- pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
      local state, pgrp = stat:match('^.*%) (%a) %-?%d+ (%d+)')
      if state and state ~= 'Z' and tonumber(pgrp) == proc.pid then
        return true
      end
    end
  end
  return false
end

--- Stop a command that run_command started: SIGTERM to its whole process
--- group (it leads one, see run_command), so that what the shell started
--- (a pipeline, a job in the background, a test runner's workers) stops
--- too, then SIGKILL to what is left of the group after M.KILL_GRACE.
---@param proc vim.SystemObj
function M.kill(proc)
  signal_group(proc, 'sigterm')
  vim.defer_fn(function()
    -- kill(-pgid, 0) answers whether any process of the group is left.
    if proc.pid and uv.kill(-proc.pid, 0) == 0 then
      signal_group(proc, 'sigkill')
    end
  end, M.KILL_GRACE)
end

--- Stop every command still running, before Neovim exits (VimLeavePre): it
--- runs in a session of its own, so nothing else would (no hang-up from
--- the terminal, no timer after exit for M.kill's SIGKILL). SIGTERM to each
--- group, up to M.EXIT_GRACE for them to go (most go at once), SIGKILL to
--- what is left.
function M.kill_running()
  local procs = vim.tbl_keys(running)
  if #procs == 0 then
    return
  end
  for _, proc in ipairs(procs) do
    signal_group(proc, 'sigterm')
  end
  local function any_left()
    for _, proc in ipairs(procs) do
      if group_left(proc) then
        return true
      end
    end
    return false
  end
  vim.wait(M.EXIT_GRACE, function()
    return not any_left()
  end, 20)
  for _, proc in ipairs(procs) do
    if group_left(proc) then
      signal_group(proc, 'sigkill')
    end
  end
end

vim.api.nvim_create_autocmd('VimLeavePre', {
  group = vim.api.nvim_create_augroup('agentd.commands', { clear = true }),
  desc = 'agentd: stop the commands run_command started that still run',
  callback = function()
    M.kill_running()
  end,
})

--- The real path of `path`, or of its nearest existing ancestor with the
--- missing tail appended (a file that write_file is about to create).
local function real_of(path)
  local tail = ''
  local dir = path
  while true do
    local real = uv.fs_realpath(dir)
    if real then
      return real .. tail
    end
    local parent = vim.fs.dirname(dir)
    if parent == dir then
      return path
    end
    tail = '/' .. vim.fs.basename(dir) .. tail
    dir = parent
  end
end

--- Resolve a tool's path argument inside the project root, or, when it is
--- absolute, inside one of `extra_roots` (the session's other folders).
--- `..`, absolute paths elsewhere and symlinks that point out of the root
--- are refused, as the daemon does for its own tools.
---@return string absolute normalized path (symlinks kept, so buffer names match what the user opened)
function M.resolve(root, path, extra_roots)
  if extra_roots and #extra_roots > 0 and type(path) == 'string' and path:sub(1, 1) == '/' then
    for _, r in ipairs(vim.list_extend({ root }, extra_roots)) do
      local ok, abs = pcall(M.resolve, r, path)
      if ok then
        return abs
      end
    end
    fail(('%s is outside the workspace folders'):format(path))
  end
  if type(path) ~= 'string' or path == '' then
    fail('path is required')
  end
  if path:match('^file://') then
    path = vim.uri_to_fname(path)
  end
  local abs = path:sub(1, 1) == '/' and path or (root .. '/' .. path)
  abs = vim.fs.normalize(abs) -- resolves `.` and `..`
  local real_root = uv.fs_realpath(root) or root
  local real = real_of(abs)
  if real ~= real_root and real:sub(1, #real_root + 1) ~= real_root .. '/' then
    fail(('%s is outside the workspace %s'):format(path, root))
  end
  return abs
end

local function rel(root, abs)
  if abs:sub(1, #root + 1) == root .. '/' then
    return abs:sub(#root + 2)
  end
  return abs
end

--- The loaded buffer of a file, if any (its unsaved text is the truth).
local function loaded_buf(abs)
  local b = require('agentd.chat').find(abs)
  if b and api.nvim_buf_is_loaded(b) then
    return b
  end
end

--- Load (or find) the buffer of a file, listed so that the user sees it in :ls.
local function load_buf(abs)
  local b = vim.fn.bufadd(abs)
  vim.fn.bufload(b)
  vim.bo[b].buflisted = true
  return b
end

--- Make `fn`'s buffer changes one undo block of their own: setting
--- 'undolevels' closes the current block (:h undo-break), before so this edit
--- does not join an earlier one, after so a later one does not join this.
local function one_undo_block(buf, fn)
  api.nvim_buf_call(buf, function()
    vim.go.undolevels = vim.go.undolevels
    fn()
    vim.go.undolevels = vim.go.undolevels
  end)
end

local function maybe_save(ctx, buf, abs)
  if not ctx.config.save_after_edit then
    return ' (unsaved: the buffer is modified, the file on disk is not)'
  end
  vim.fn.mkdir(vim.fs.dirname(abs), 'p')
  api.nvim_buf_call(buf, function()
    vim.cmd('silent keepalt noautocmd write!')
  end)
  return ' (saved)'
end

--- 0-based byte offset in `text` -> 0-based row and column.
local function pos_of(text, offset)
  local row, line_start = 0, 1
  local i = 1
  while true do
    local nl = text:find('\n', i, true)
    if not nl or nl > offset then
      break
    end
    row = row + 1
    line_start = nl + 1
    i = nl + 1
  end
  return row, offset - (line_start - 1)
end

local handlers = {}

function handlers.read_file(ctx, args, done)
  local abs = M.resolve(ctx.root, args.path, ctx.extra_roots)
  local lines
  local buf = loaded_buf(abs)
  if buf then
    lines = api.nvim_buf_get_lines(buf, 0, -1, false)
  else
    local stat = uv.fs_stat(abs)
    if not stat then
      fail(('%s does not exist'):format(args.path))
    elseif stat.type ~= 'file' then
      fail(('%s is not a regular file'):format(args.path))
    end
    local f = assert(io.open(abs, 'rb'))
    local data = f:read(READ_LIMIT_BYTES + 1) or ''
    f:close()
    if data:sub(1, 8192):find('\0', 1, true) then
      fail(('%s looks like a binary file'):format(args.path))
    end
    local truncated = #data > READ_LIMIT_BYTES
    lines = vim.split(data:sub(1, READ_LIMIT_BYTES), '\r?\n')
    if lines[#lines] == '' then
      table.remove(lines)
    end
    if truncated then
      lines.truncated = true
    end
  end
  local start = math.max(1, tonumber(args.offset) or 1)
  local stop = #lines
  if tonumber(args.limit) then
    stop = math.min(#lines, start - 1 + math.max(0, tonumber(args.limit)))
  end
  local width = #tostring(stop > 0 and stop or 1)
  local out = {}
  for i = start, stop do
    out[#out + 1] = ('%' .. width .. 'd  %s'):format(i, lines[i])
  end
  if lines.truncated then
    out[#out + 1] = ('[file truncated at %d bytes]'):format(READ_LIMIT_BYTES)
  end
  done(#out > 0 and table.concat(out, '\n') or '(empty file)')
end

function handlers.edit_file(ctx, args, done)
  local abs = M.resolve(ctx.root, args.path, ctx.extra_roots)
  local old, new = args.old_text, args.new_text
  if type(old) ~= 'string' or old == '' then
    fail('old_text must be a non-empty string')
  end
  if type(new) ~= 'string' then
    fail('new_text must be a string')
  end
  if not loaded_buf(abs) and not uv.fs_stat(abs) then
    fail(('%s does not exist (use write_file to create it)'):format(args.path))
  end
  local buf = load_buf(abs)
  local lines = api.nvim_buf_get_lines(buf, 0, -1, false)
  local body = table.concat(lines, '\n')
  -- The buffer's final newline is implicit ('eol'); a model quoting the end
  -- of the file includes it.
  local text = body .. (vim.bo[buf].eol and '\n' or '')
  local first = text:find(old, 1, true)
  if not first then
    fail(('old_text was not found in %s'):format(args.path))
  end
  local count, at = 0, 1
  while true do
    local s = text:find(old, at, true)
    if not s then
      break
    end
    count = count + 1
    at = s + 1
  end
  if count > 1 then
    fail(('old_text occurs %d times in %s; include more surrounding text so it matches once'):format(count, args.path))
  end
  local s0, e0 = first - 1, first - 1 + #old -- 0-based, end exclusive
  one_undo_block(buf, function()
    if e0 <= #body then
      -- The usual case: replace just that span, so marks, folds and the
      -- cursor elsewhere in the buffer stay put.
      local sr, sc = pos_of(body, s0)
      local er, ec = pos_of(body, e0)
      api.nvim_buf_set_text(buf, sr, sc, er, ec, vim.split(new, '\n', { plain = true }))
    else
      -- The span takes in the implicit final newline: rewrite the lines.
      local result = text:sub(1, s0) .. new .. text:sub(e0 + 1)
      local new_lines = vim.split(result, '\n', { plain = true })
      if new_lines[#new_lines] == '' then
        table.remove(new_lines)
      else
        vim.bo[buf].eol = false
      end
      api.nvim_buf_set_lines(buf, 0, -1, false, new_lines)
    end
  end)
  local line = select(1, pos_of(body, math.min(s0, #body))) + 1
  done(('Applied the edit to %s at line %d%s.'):format(rel(ctx.root, abs), line, maybe_save(ctx, buf, abs)))
end

function handlers.write_file(ctx, args, done)
  local abs = M.resolve(ctx.root, args.path, ctx.extra_roots)
  if type(args.content) ~= 'string' then
    fail('content must be a string')
  end
  local stat = uv.fs_stat(abs)
  if stat and stat.type ~= 'file' then
    fail(('%s exists and is not a regular file'):format(args.path))
  end
  local existed = stat ~= nil or loaded_buf(abs) ~= nil
  local buf = load_buf(abs)
  local lines = vim.split(args.content, '\n', { plain = true })
  local eol = lines[#lines] == ''
  if eol then
    table.remove(lines)
  end
  one_undo_block(buf, function()
    api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.bo[buf].eol = eol or #lines == 0
  end)
  done(('%s %s (%d lines)%s.'):format(existed and 'Overwrote' or 'Created', rel(ctx.root, abs), #lines, maybe_save(ctx, buf, abs)))
end

function handlers.run_command(ctx, args, done)
  if type(args.command) ~= 'string' or args.command == '' then
    fail('command is required')
  end
  local cwd = ctx.root
  if args.cwd and args.cwd ~= '' then
    cwd = M.resolve(ctx.root, args.cwd, ctx.extra_roots)
    local stat = uv.fs_stat(cwd)
    if not stat or stat.type ~= 'directory' then
      fail(('cwd %s is not a directory'):format(args.cwd))
    end
  end
  -- A POSIX shell by default, whatever 'shell' is: models write sh syntax.
  local argv = vim.list_extend(vim.deepcopy(ctx.config.shell or { 'sh', '-c' }), { args.command })
  local exited, timed_out = false, false
  local started ---@type vim.SystemObj? the command, once vim.system returned
  local ok, proc = pcall(vim.system, argv, {
    cwd = cwd,
    text = true,
    stdin = false,
    -- Its own session and process group (setsid), which M.kill stops whole:
    -- killing the shell alone would leave what it started running. Without
    -- a controlling terminal, it cannot read from or draw on Neovim's.
    detach = true,
  }, function(res)
    exited = true
    if started then
      running[started] = nil
    end
    vim.schedule(function()
      local parts = {}
      if res.stdout and res.stdout ~= '' then
        parts[#parts + 1] = res.stdout
      end
      if res.stderr and res.stderr ~= '' then
        parts[#parts + 1] = res.stderr
      end
      local output = table.concat(parts, parts[1] and not parts[1]:match('\n$') and '\n' or '')
      local status
      local killed = (res.signal and res.signal ~= 0) or timed_out
      if res.signal and res.signal ~= 0 then
        status = ('killed by signal %d'):format(res.signal)
      else
        status = ('exit code %d'):format(res.code)
      end
      if timed_out then
        status = ('timed out after %d ms, %s'):format(ctx.config.command_timeout, status)
      end
      local text = ('$ %s\n%s%s[%s]'):format(args.command, output, output ~= '' and not output:match('\n$') and '\n' or '', status)
      -- A non-zero exit is an answer (a failing test run is what the model
      -- asked to see), not a tool failure; a killed command is one.
      done(text, killed, killed and nil or status)
    end)
  end)
  if not ok then
    fail('could not start the command: ' .. tostring(proc))
  end
  started = proc
  if not exited then
    running[proc] = true -- stopped if Neovim exits first (M.kill_running)
  end
  -- The time limit is ours, not vim.system's `timeout` (which signals the
  -- shell alone): the whole group is stopped, and what a shell that exited
  -- left running in the background (holding the output pipes, so that no
  -- result would come) goes too.
  if ctx.config.command_timeout then
    vim.defer_fn(function()
      if not exited then
        timed_out = true
        M.kill(proc)
      end
    end, ctx.config.command_timeout)
  end
  if ctx.on_process then
    ctx.on_process(proc)
  end
end

--- Short text for the chat line of a call.
function M.summary(name, args)
  args = type(args) == 'table' and args or {}
  if name == 'run_command' and args.command then
    return '`' .. args.command:gsub('\n.*', ' …') .. '`'
  end
  if args.path then
    return '`' .. tostring(args.path) .. '`'
  end
  if args.query then
    return '`' .. tostring(args.query) .. '`'
  end
  if args.pattern then
    return '`' .. tostring(args.pattern) .. '`'
  end
  local ok, json = pcall(vim.json.encode, args)
  json = ok and json or ''
  return '`' .. (#json > 60 and json:sub(1, 57) .. '...' or json) .. '`'
end

--- The question asked before a tool that changes something runs.
local function question(ctx, name, args)
  if name == 'run_command' then
    return ('agentd wants to run in %s:\n  %s\nRun it?'):format(args.cwd or ctx.root, args.command)
  end
  local function clip(s)
    s = tostring(s or '')
    local lines = vim.split(s, '\n', { plain = true })
    if #lines > 8 then
      lines = vim.list_slice(lines, 1, 8)
      lines[#lines + 1] = '…'
    end
    return lines
  end
  local out = {}
  if name == 'edit_file' then
    out[#out + 1] = ('agentd wants to edit %s:'):format(args.path)
    for _, l in ipairs(clip(args.old_text)) do
      out[#out + 1] = '- ' .. l
    end
    for _, l in ipairs(clip(args.new_text)) do
      out[#out + 1] = '+ ' .. l
    end
  else
    out[#out + 1] = ('agentd wants to write %s:'):format(args.path)
    for _, l in ipairs(clip(args.content)) do
      out[#out + 1] = '  ' .. l
    end
  end
  out[#out + 1] = 'Apply?'
  return table.concat(out, '\n')
end

--- The question of an agent/requestPermission (a daemon-run tool, such as
--- an MCP server's): which tool, on which server, with what arguments.
function M.permission_question(params)
  local tool = params.serverTool or params.tool or '?'
  local out = {}
  if params.kind == 'sampling' and type(params.description) == 'string' then
    -- An MCP server asks to use the model: what it asks, in the daemon's words.
    for line in params.description:gmatch('[^\n]+') do
      out[#out + 1] = #out == 0 and line or '  ' .. line
    end
    out[#out + 1] = 'Allow it?'
    return table.concat(out, '\n')
  end
  if params.server then
    out[1] = ('agentd wants to call %s on the MCP server %s'):format(tool, params.server)
  else
    out[1] = ('agentd wants to run %s'):format(tool)
  end
  if type(params.description) == 'string' and params.description ~= '' then
    out[1] = out[1] .. ' (' .. params.description:gsub('\n.*', ' …') .. ')'
  end
  out[1] = out[1] .. ':'
  local ok, json = pcall(vim.json.encode, params.arguments or vim.empty_dict())
  json = ok and json or '?'
  out[2] = '  ' .. (#json > 400 and json:sub(1, 397) .. '...' or json)
  out[3] = 'Allow it?'
  return table.concat(out, '\n')
end

--- Ask whether a call may run. `auto_approve` decides first: true (all), a
--- table {name = true|false}, or a function(name, args) returning true,
--- false or nil (nil: ask). Then `confirm(name, args, question, cb)`, else
--- vim.ui.select.
--- What `auto_approve` says about a call: true, false or nil (ask).
function M.verdict(config, name, args)
  local auto = config.auto_approve
  if auto == true then
    return true
  elseif type(auto) == 'table' then
    return auto[name]
  elseif type(auto) == 'function' then
    return auto(name, args)
  end
end

--- Ask the user's `confirm` hook (`confirm(name, args, question, cb)`) about
--- a call; cb(yes) gets its answer as a boolean. A hook may return a
--- function that takes its question back (closes its window): returned,
--- guarded, to be called once if the call is withdrawn before it answers.
--- A hook that returns nothing still works; its late answer is ignored.
--- Client tools and the daemon's permission questions (MCP tools) both ask
--- through here, so one hook covers both.
function M.ask_confirm(confirm, name, args, q, cb)
  local close = confirm(name, args, q, function(yes)
    cb(yes and true or false)
  end)
  if type(close) ~= 'function' then
    return nil
  end
  return function()
    local ok, err = pcall(close)
    if not ok then
      vim.notify("agentd: the confirm hook's close function failed: " .. tostring(err), vim.log.levels.WARN)
    end
  end
end

--- Ask whether a call may run; cb(yes) gets the answer. Returns a function
--- that takes the question back (nil when there is none to take back): it
--- closes the built-in question's picker, or is what the user's `confirm`
--- hook returned.
local function approve(ctx, name, args, cb)
  if not M.needs_approval[name] then
    return cb(true)
  end
  local verdict = M.verdict(ctx.config, name, args)
  -- The mode the user picked (auto-edit) already said yes to this edit; an
  -- explicit `false` in auto_approve still refuses it.
  if verdict == nil and ctx.auto_approved then
    verdict = true
  end
  if verdict ~= nil then
    return cb(verdict and true or false)
  end
  local q = question(ctx, name, args)
  if type(ctx.config.confirm) == 'function' then
    return M.ask_confirm(ctx.config.confirm, name, args, q, cb)
  end
  return picker.select_closable({ 'Yes', 'No' }, { prompt = q }, function(choice)
    cb(choice == 'Yes')
  end)
end

--- Run one client tool call. `report(status, text, is_error)` is called
--- once with the chat status, the result text and the error flag; statuses
--- on the way ('awaiting approval', 'running') go to `progress(status)`.
--- Returns a function that withdraws the call (the prompt was cancelled or
--- the daemon gave up on the call): it is reported `cancelled` at once, an
--- approval still open is taken back (its picker closed, or the `confirm`
--- hook's close function called) and runs nothing when answered late, a
--- command still running is killed with its process group (M.kill), and a
--- tool still running has its result dropped.
---@param ctx agentd.ToolCtx
---@return fun() withdraw
function M.run(ctx, name, args, progress, report)
  if type(args) ~= 'table' then
    args = {}
  end
  local handler = handlers[name]
  if not handler then
    report('failed', ('the editor has no client tool named %q'):format(tostring(name)), true)
    return function() end
  end
  local finished = false
  local function finish(status, text, is_error)
    if finished then
      return
    end
    finished = true
    report(status, text, is_error)
  end
  local function guarded(fn)
    local ok, err = pcall(fn)
    if not ok then
      local msg = type(err) == 'table' and err.agentd or ('%s failed: %s'):format(name, tostring(err))
      finish('failed', msg, true)
    end
  end
  local answered, close_question = false, nil
  local running -- the command the handler started, until it exits
  local function withdraw()
    finish('cancelled', 'The call was withdrawn.', true)
    if close_question then
      close_question()
      close_question = nil
    end
    if running then
      M.kill(running)
      running = nil
    end
  end
  -- The handler's own context: it says which command it started.
  local call_ctx = setmetatable({
    on_process = function(proc)
      running = proc
    end,
  }, { __index = ctx })
  if M.needs_approval[name] then
    progress('awaiting approval')
  end
  guarded(function()
    close_question = approve(ctx, name, args, function(yes)
      answered, close_question = true, nil
      if finished then
        return -- withdrawn while the question was open: a late yes runs nothing
      end
      if ctx.cancelled() then
        return finish('cancelled', 'The prompt was cancelled before the tool ran.', true)
      end
      if not yes then
        return finish('declined', ('The user declined the %s call.'):format(name), true)
      end
      progress('running')
      guarded(function()
        handler(call_ctx, args, function(text, is_error, note)
          running = nil -- exited: nothing left to kill
          if ctx.cancelled() then
            return finish('cancelled', 'The prompt was cancelled.', true)
          end
          local status = is_error and 'failed' or 'completed'
          finish(note and (status .. ' (' .. note .. ')') or status, text, is_error or false)
        end)
      end)
    end)
    if answered then
      close_question = nil -- answered while the picker was called (one that blocks)
    end
  end)
  return withdraw
end

return M
