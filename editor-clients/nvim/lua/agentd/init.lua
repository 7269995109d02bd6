-- agentd for Neovim: one daemon per project root, spoken to through the
-- built-in LSP client (docs/protocol.md in the agentd repository is the wire
-- contract). The daemon is started with attach = false: it serves no buffer,
-- it runs agent turns whose progress this module renders in `agentd://chat`.
local api = vim.api
local chat = require('agentd.chat')
local tools = require('agentd.tools')
local picker = require('agentd.picker')
local elicit = require('agentd.elicit')

local M = {}

--- The protocol version this plugin speaks (initialize result:
--- capabilities.experimental.agentd.protocolVersion).
M.PROTOCOL_VERSION = 1

local ERR = {
  unknown_session = -32001,
  busy = -32003,
  cancelled = -32800,
}

local defaults = {
  -- Client tools run without asking when listed here: true (all), a table
  -- {edit_file = true, run_command = false} (false refuses without asking),
  -- or a function(name, args) returning true, false or nil (nil: ask).
  auto_approve = {},
  -- function(name, args, question, callback(yes)) replacing the default
  -- vim.ui.select question: for client tools, and for the daemon's own
  -- permission questions (MCP tools, `mcp__server__tool`: yes allows once,
  -- no rejects). It may return a function that takes its
  -- question back (closes its window): called once if the call is withdrawn
  -- (the prompt cancelled, here or in the daemon) before the callback.
  confirm = nil,
  -- Write a buffer to disk after edit_file/write_file changed it. Off by
  -- default: the change stays in the buffer, to review and undo, until :w.
  save_after_edit = false,
  -- Show the chat buffer when a prompt is asked, with this Ex command.
  open_chat = true,
  chat_position = 'botright vsplit',
  -- run_command: argv prefix the command is appended to, and time limit (ms).
  shell = { 'sh', '-c' },
  command_timeout = 120000,
  -- After :AgentdCancel the next prompt waits for the daemon's cancel
  -- acknowledgement; past this (ms) it is sent anyway (a busy answer is retried).
  cancel_ack_timeout = 5000,
  -- More folders a new session's tools may work in, beside its project root
  -- (sent as `additionalDirectories`): a list of paths, or a function(root)
  -- returning one. Read when a session starts; `~` and $VARS are expanded,
  -- relative paths are the project root's.
  additional_directories = nil,
}

M.config = vim.deepcopy(defaults)

---@param opts table|nil see `defaults` above and :h agentd-config
function M.setup(opts)
  opts = opts or {}
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts)
  -- tbl_deep_extend merges tables key by key; these are taken whole.
  for _, key in ipairs({ 'auto_approve', 'shell', 'additional_directories' }) do
    if opts[key] ~= nil then
      M.config[key] = opts[key]
    end
  end
end

---@class agentd.Turn
---@field prompt string|table
---@field r table chat render state
---@field calls table<string, table> tool calls by id (a cancel withdraws them: their commands are killed)
---@field request_id integer?
---@field client_id integer?
---@field cancelled boolean?

---@class agentd.Project
---@field root string
---@field client_id integer?
---@field session_id string?
---@field turn agentd.Turn?
---@field ready function[] waiting for the client's initialize
---@field session_waiters function[]?
---@field blockers table<string, boolean> a cancel or reset the daemon has not finished yet
---@field after function[] prompts waiting for the blockers
---@field last_stop string?
---@field found table? the locations of the last search or glob, for :AgentdQuickfix
---@field context {tokens: integer, window: integer}? the context meter (usage updates)
---@field setup table? the session's mode and model and their choices (agent/newSession, agent/loadSession); nil from a daemon without modes
---@field plan table? the session's plan entries (the last `plan` update)
---@field commands table|false|nil slash commands (agent/listCommands); false: the daemon has none
---@field replay table? the render state while agent/loadSession replays a session

---@type table<string, agentd.Project>
local projects = {}
---@type table<string, agentd.Project>
local by_session = {}
local last_root ---@type string?

local function notify(msg, level)
  vim.notify('agentd: ' .. msg, level or vim.log.levels.INFO)
end

local function errmsg(err)
  if type(err) == 'table' then
    return ('%s (%s)'):format(err.message or vim.inspect(err), tostring(err.code))
  end
  return tostring(err)
end

--- A config callback field (a function or a list of them) as a list.
local function as_list(v)
  if v == nil then
    return {}
  end
  return type(v) == 'table' and v or { v }
end

local function resolved_config()
  local cfg = vim.lsp.config.agentd
  if not cfg or not cfg.cmd then
    error('no agentd LSP config: is the plugin on runtimepath (lsp/agentd.lua)?', 0)
  end
  return cfg
end

--- The project root for the current buffer: the nearest directory with a
--- root marker, else the current directory. From a non-file buffer (the
--- chat itself, a terminal) the last project used is kept.
function M.root()
  local name = api.nvim_buf_get_name(0)
  local source
  if vim.bo.buftype == '' and name ~= '' then
    source = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(name, ':p')))
  elseif last_root then
    return last_root
  else
    source = vim.fn.getcwd()
  end
  local ok, cfg = pcall(resolved_config)
  local markers = ok and cfg.root_markers or { '.git' }
  local root = vim.fs.root(source, markers) or vim.fn.getcwd()
  return vim.uv.fs_realpath(root) or root
end

---@return agentd.Project
local function project(root)
  root = vim.uv.fs_realpath(root) or root
  local p = projects[root]
  if not p then
    p = { root = root, ready = {}, blockers = {}, after = {} }
    projects[root] = p
  end
  return p
end

local function header(p)
  return '# agentd · ' .. p.root
end

local function client_of(p)
  local c = p.client_id and vim.lsp.get_client_by_id(p.client_id)
  if c and not c:is_stopped() then
    return c
  end
end

--- Run the prompts that waited for a cancel or reset to finish.
local function unblock(p, key)
  p.blockers[key] = nil
  if next(p.blockers) then
    return
  end
  local after = p.after
  p.after = {}
  for _, fn in ipairs(after) do
    fn()
  end
end

local function forget_session(p)
  if p.session_id then
    by_session[p.session_id] = nil
  end
  p.session_id = nil
  p.setup = nil
  p.plan = nil
  p.extra_roots = nil
end

--- The folders `additional_directories` names for a new session of the
--- project at `root`: absolute, `~` and $VARS expanded, relative ones the
--- root's; nil when none. A bad value is reported, and none are sent.
local function additional_directories(root)
  local value = M.config.additional_directories
  if type(value) == 'function' then
    local ok, res = pcall(value, root)
    if not ok then
      notify('additional_directories failed: ' .. tostring(res), vim.log.levels.ERROR)
      return nil
    end
    value = res
  end
  if value == nil then
    return nil
  end
  if type(value) ~= 'table' then
    notify('additional_directories must be a list of paths (or a function returning one)', vim.log.levels.ERROR)
    return nil
  end
  local dirs = {}
  for _, dir in ipairs(value) do
    if type(dir) ~= 'string' or dir == '' then
      notify('additional_directories: not a path: ' .. vim.inspect(dir), vim.log.levels.ERROR)
      return nil
    end
    dir = vim.fn.expand(dir)
    if dir:sub(1, 1) ~= '/' then
      dir = root .. '/' .. dir
    end
    dirs[#dirs + 1] = vim.fs.normalize(dir)
  end
  return #dirs > 0 and dirs or nil
end

--- The folders of Neovim's workspace beside the project root at `root`:
--- the agentd client's `workspace_folders` (`vim.lsp.config('agentd', {
--- workspace_folders = ... })`, or added to the client later), as real
--- paths, all but the root (the session's workspace root, whatever their
--- order). One that is not a directory (gone, a file) is reported and left
--- out: the daemon would refuse the whole session for it.
local function workspace_directories(c, root)
  local dirs = {}
  for _, folder in ipairs(c.workspace_folders or {}) do
    local uri = type(folder) == 'table' and folder.uri or nil
    if type(uri) == 'string' and uri:match('^file://') then
      local dir = vim.fs.normalize(vim.uri_to_fname(uri))
      local real = vim.uv.fs_realpath(dir)
      if not real or vim.fn.isdirectory(real) ~= 1 then
        notify('workspace folder ' .. dir .. ' is not a directory: not given to the session', vim.log.levels.WARN)
      elseif real ~= root then
        dirs[#dirs + 1] = real
      end
    end
  end
  return dirs
end

--- What a new session of `p` is given as `additionalDirectories`: Neovim's
--- workspace folders beside the root, then the ones `additional_directories`
--- names, each once; nil when none.
local function session_directories(c, root)
  local dirs, seen = {}, { [root] = true }
  local from_option = additional_directories(root) or {}
  for _, dir in ipairs(vim.list_extend(workspace_directories(c, root), from_option)) do
    if not seen[dir] then
      seen[dir] = true
      dirs[#dirs + 1] = dir
    end
  end
  return #dirs > 0 and dirs or nil
end

--- The folders beside the root a loaded or forked session has, as the
--- daemon says them (nil from a daemon that does not): the editor's own
--- tools take absolute paths inside them too.
local function keep_roots(p, res)
  if type(res) == 'table' and type(res.additionalDirectories) == 'table' then
    p.extra_roots = res.additionalDirectories
  else
    p.extra_roots = nil
  end
end

--- Keep what agent/newSession or agent/loadSession says about how the
--- session runs. A daemon without modes answers none of it: then :AgentdMode
--- and :AgentdModel say so instead of offering choices.
local function keep_setup(p, res)
  if type(res) == 'table' and type(res.modes) == 'table' and res.mode then
    p.setup = {
      mode = res.mode,
      modes = res.modes,
      model = res.model,
      models = type(res.models) == 'table' and res.models or {},
    }
  else
    p.setup = nil
  end
end

--- Fetch the daemon's slash commands once per client (agent/listCommands),
--- for completion of :AgentdAsk /...; `false` when the daemon has none.
local function fetch_commands(p, c, sid)
  if p.commands ~= nil or p.commands_pending then
    return
  end
  p.commands_pending = true
  c:request('agent/listCommands', { sessionId = sid }, function(err, res)
    p.commands_pending = nil
    if err or type(res) ~= 'table' or type(res.commands) ~= 'table' then
      -- -32601: a daemon before slash commands; another error: try next time.
      if err and err.code == -32601 then
        p.commands = false
      end
      return
    end
    p.commands = res.commands
  end)
end

--- "context 63 %", from the last usage update (nil before the first).
local function context_label(p)
  local c = p.context
  if not c or not c.window or c.window <= 0 then
    return nil
  end
  return ('context %d %%'):format(math.floor(100 * (c.tokens or 0) / c.window + 0.5))
end

local function thousands(n)
  local s = tostring(math.floor(tonumber(n) or 0))
  return (s:reverse():gsub('(%d%d%d)', '%1,'):reverse():gsub('^,', ''))
end

--- The chat line of a compaction report (agent/update kind compaction, or
--- agent/compact's result).
local function compaction_line(u)
  local status = u.status
  if status == 'started' then
    return '- compacting the conversation…'
  elseif status == 'done' and (u.summarized or 0) == 0 and (u.cleared or 0) == 0 then
    return '- ' .. tostring(u.message or 'nothing to compact')
  elseif status == 'done' then
    local what = {}
    if (u.summarized or 0) > 0 then
      what[#what + 1] = ('%d messages summarised'):format(u.summarized)
    end
    if (u.cleared or 0) > 0 then
      what[#what + 1] = ('%d tool outputs cleared'):format(u.cleared)
    end
    return ('— conversation compacted — about %s → %s tokens (%s)'):format(
      thousands(u.tokensBefore),
      thousands(u.tokensAfter),
      table.concat(what, ', ')
    )
  elseif status == 'failed' then
    return '- compaction failed: ' .. tostring(u.message or '?')
  end
  return '- compaction ' .. tostring(status)
end

--- A compaction report changes the meter: the conversation is that long now.
local function compaction_meter(p, u)
  if u.status == 'done' and p.context and u.tokensAfter then
    p.context.tokens = u.tokensAfter
  end
end

local function end_turn(p, turn, label)
  if p.turn == turn then
    p.turn = nil
  end
  -- A question still open for this turn (a permission, a client tool's
  -- approval) has no one left to answer it, and a client tool still running
  -- has no one to take its result.
  for _, call in pairs(turn.calls or {}) do
    if call.withdraw then
      call.withdraw()
    end
  end
  p.last_stop = label
  chat.finish(turn.r, label)
  api.nvim_exec_autocmds('User', {
    pattern = 'AgentdTurnDone',
    modeline = false,
    data = { root = p.root, stop = label },
  })
end

-- --- the client ------------------------------------------------------------------

local function on_exit(p, client_id, code, signal)
  if p.client_id ~= client_id then
    return
  end
  p.client_id = nil
  forget_session(p) -- sessions live in the daemon's memory
  p.commands = nil -- the next daemon may offer others
  p.replay = nil
  p.blockers = {}
  p.cancel_wait = nil
  local reason = ('agentd exited (code %d%s)'):format(code, signal ~= 0 and (', signal ' .. signal) or '')
  local ready = p.ready
  p.ready = {}
  for _, fn in ipairs(ready) do
    fn(nil, reason .. ' before it was ready; see :LspLog')
  end
  if p.turn then
    end_turn(p, p.turn, reason)
  end
  unblock(p, '-')
end

local function start(p)
  local config = vim.deepcopy(resolved_config())
  config.name = 'agentd'
  config.root_dir = p.root
  -- Our handlers win for our methods; a user's handlers for others stay.
  config.handlers = vim.tbl_extend('force', config.handlers or {}, M.handlers)
  local user_init = as_list(config.on_init)
  config.on_init = function(client, result)
    for _, fn in ipairs(user_init) do
      fn(client, result)
    end
    local ready = p.ready
    p.ready = {}
    for _, fn in ipairs(ready) do
      fn(client)
    end
    -- Ready for completion of :AgentdAsk /... by the time it is typed.
    fetch_commands(p, client, nil)
  end
  local user_exit = as_list(config.on_exit)
  config.on_exit = function(code, signal, client_id)
    for _, fn in ipairs(user_exit) do
      fn(code, signal, client_id)
    end
    -- Process exit is reported from a libuv callback: API calls must wait.
    vim.schedule(function()
      on_exit(p, client_id, code, signal)
    end)
  end
  return vim.lsp.start(config, {
    attach = false,
    reuse_client = function(client, cfg)
      return client.name == cfg.name and client.root_dir == cfg.root_dir and not client:is_stopped()
    end,
  })
end

--- Call fn(client) once the project's daemon is initialized (started if
--- needed), or fn(nil, reason).
local function with_client(p, fn)
  local c = client_of(p)
  if not c then
    local ok, id = pcall(start, p)
    if not ok or not id then
      local cmd = (select(2, pcall(resolved_config)) or {}).cmd
      return fn(nil, ('could not start %s: %s'):format(
        type(cmd) == 'table' and table.concat(cmd, ' ') or 'agentd',
        ok and 'see :checkhealth agentd' or tostring(id)
      ))
    end
    p.client_id = id
    c = vim.lsp.get_client_by_id(id)
    if not c then
      return fn(nil, 'the agentd client vanished at start')
    end
  end
  if c.initialized then
    return fn(c)
  end
  table.insert(p.ready, fn)
end

--- Call fn(client, sessionId) with the project's session (made on first use).
local function with_session(p, fn)
  with_client(p, function(c, err)
    if not c then
      return fn(nil, nil, err)
    end
    if p.session_id then
      return fn(c, p.session_id)
    end
    if p.session_waiters then
      table.insert(p.session_waiters, fn)
      return
    end
    p.session_waiters = { fn }
    local extra = session_directories(c, p.root)
    -- Absent when there are none: a daemon older than the field is not asked about it.
    local params = { workspaceRoot = p.root, additionalDirectories = extra }
    c:request('agent/newSession', params, function(e, res)
      local waiters = p.session_waiters or {}
      p.session_waiters = nil
      if e or type(res) ~= 'table' or not res.sessionId then
        for _, w in ipairs(waiters) do
          w(nil, nil, 'agent/newSession failed: ' .. errmsg(e or 'no sessionId'))
        end
        return
      end
      p.session_id = res.sessionId
      by_session[res.sessionId] = p
      p.extra_roots = extra
      keep_setup(p, res)
      fetch_commands(p, c, res.sessionId)
      for _, w in ipairs(waiters) do
        w(c, res.sessionId)
      end
    end, chat.buf())
  end)
end

-- --- rendering updates ---------------------------------------------------------

--- The name to show for a tool: an MCP tool's own name (the model's name
--- is `mcp__<server>__<tool>`; the server is shown beside it).
local function shown_name(name, server)
  if server then
    local prefix = 'mcp__' .. server .. '__'
    if name:sub(1, #prefix) == prefix and #name > #prefix then
      return name:sub(#prefix + 1)
    end
  end
  return name
end

local function tool_line(call)
  local where = ''
  if call.server then
    where = ' · MCP ' .. call.server
  elseif call.executor == 'client' then
    where = ' · editor'
  end
  return ('- tool **%s** %s%s — %s'):format(shown_name(call.name, call.server), call.summary, where, call.status)
end

local function set_call_status(call, status)
  call.status = status
  chat.set_line(call.key, tool_line(call))
end

local function first_line(text)
  text = tostring(text or ''):gsub('^%s+', '')
  local line = text:match('^[^\n]*') or ''
  return #line > 100 and line:sub(1, 97) .. '...' or line
end

local function run_client_tool(p, turn, c, sid, call, args)
  if tools.needs_approval[call.name] and p.setup and p.setup.mode == 'ask' then
    -- Ask is read-only: an edit or a command is never run, whatever the
    -- daemon announced (one that refuses the call itself may still send it
    -- to the editor as a client call).
    call.final = true
    set_call_status(call, 'refused: the Ask mode is read-only')
    c:notify('agent/toolResult', {
      sessionId = sid,
      toolCallId = call.id,
      content = ('%s is not available in the Ask mode (read-only); the call was not made.'):format(call.name),
      isError = true,
    })
    return
  end
  local ctx = {
    root = p.root,
    extra_roots = p.extra_roots,
    config = M.config,
    cancelled = function()
      return turn.cancelled == true or p.turn ~= turn
    end,
    -- The session's mode runs this call without asking (an edit in auto-edit).
    auto_approved = call.auto_approve,
  }
  local withdrawn = false
  local withdraw = tools.run(ctx, call.name, args, function(status)
    if not call.final then
      set_call_status(call, status)
    end
  end, function(status, text, is_error)
    call.final = true
    call.withdraw = nil
    local shown = status
    if is_error and status ~= 'cancelled' then
      shown = status .. ': ' .. first_line(text)
    end
    set_call_status(call, shown)
    if withdrawn or ctx.cancelled() then
      return -- the daemon withdrew the call; a result would be ignored
    end
    c:notify('agent/toolResult', {
      sessionId = sid,
      toolCallId = call.id,
      content = text,
      isError = is_error and true or false,
    })
  end)
  if not call.final then
    function call.withdraw()
      withdrawn = true
      withdraw()
    end
  end
end

-- The daemon tools whose results are places to go to.
local FINDERS = { search = true, glob = true }

--- A quickfix list from a finished search or glob: the update's locations
--- ({path, line?}), with each line's text taken from the result the model
--- got (search groups `N:text` lines under a line with the file's path).
local function found_list(call, u)
  local texts, file = {}, nil
  for _, line in ipairs(vim.split(u.content or '', '\n', { plain = true })) do
    local n, text = line:match('^(%d+):(.*)$')
    if n and file then
      texts[file .. '\0' .. n] = text
    elseif line ~= '' and line ~= '--' and not line:match('^%d+%-') and not line:match('^%[') then
      file = line
    end
  end
  local items = {}
  for _, loc in ipairs(u.locations) do
    if type(loc) == 'table' and type(loc.path) == 'string' then
      local text = call.name .. ' ' .. call.summary
      for key, t in pairs(texts) do
        local f, n = key:match('^(.*)%z(%d+)$')
        if tonumber(n) == loc.line and loc.path:sub(-#f - 1) == '/' .. f then
          text = t
          break
        end
      end
      items[#items + 1] = { filename = loc.path, lnum = loc.line or 1, col = 1, text = text }
    end
  end
  return { title = 'agentd: ' .. call.name .. ' ' .. call.summary, items = items }
end

--- The display name of a mode id ("Ask" for ask), from the session's modes.
local function mode_name(p, id)
  for _, m in ipairs(p.setup and p.setup.modes or {}) do
    if m.id == id then
      return m.name or id
    end
  end
  return tostring(id)
end

--- A line or a note: inside a turn a block line, outside a standalone note.
local function say(turn, text)
  if turn and turn.r and not turn.r.finished then
    chat.line(turn.r, '- ' .. text)
  else
    chat.note(text)
  end
end

--- Take back what is still open for `call` (the call ended or the prompt
--- was cancelled while it was): an agent/requestPermission is answered
--- `cancelled`; a client tool's approval is not asked any more and its late
--- result is not sent. Either way the picker of the question is closed.
local function withdraw(call)
  if call.withdraw then
    call.withdraw()
  end
end

--- The plan (a `plan` update, or loadSession's `plan`): a section of the
--- turn, redrawn in place as the model ticks entries off.
local function show_plan(p, turn, entries)
  p.plan = entries
  local lines = chat.plan_lines(entries)
  if turn.plan_key and not turn.r.finished then
    chat.set_block(turn.plan_key, lines)
  else
    turn.plan_key = chat.block(turn.r, lines)
  end
end

local function on_update(p, turn, u)
  local kind = u.kind
  if turn.replay and not turn.r and kind ~= 'user_message' then
    -- A replay starts with the first prompt; anything before it gets a turn too.
    turn.r = chat.begin_turn('…')
  end
  if kind == 'message_chunk' then
    chat.text(turn.r, u.text or '')
  elseif kind == 'thought_chunk' then
    chat.thought(turn.r, u.text or '')
  elseif kind == 'tool_call' then
    turn.ncalls = (turn.ncalls or 0) + 1
    local call = {
      id = u.toolCallId or ('#' .. turn.ncalls),
      name = u.name or '?',
      executor = u.executor,
      summary = tools.summary(u.name, u.arguments),
      status = u.executor == 'client' and 'pending' or 'running',
      server = type(u.server) == 'string' and u.server or nil,
      auto_approve = u.autoApprove == true,
    }
    call.key = chat.line(turn.r, tool_line(call))
    turn.calls[call.id] = call
    -- A replayed call ran long ago: only its outcome is shown.
    if u.executor == 'client' and not turn.replay then
      local c = client_of(p)
      if c then
        run_client_tool(p, turn, c, p.session_id, call, u.arguments)
      end
    end
  elseif kind == 'tool_call_update' then
    local call = turn.calls[u.toolCallId]
    -- For the editor's own tools the status it shows is the better one
    -- ("declined", "failed: ..."); only a cancel from the daemon overrides it.
    if call and (call.executor ~= 'client' or turn.replay or u.status == 'cancelled') then
      if u.status ~= 'running' then
        withdraw(call)
      end
      local status = u.status or '?'
      if status == 'failed' and u.content then
        status = status .. ': ' .. first_line(u.content)
      end
      if type(u.locations) == 'table' and #u.locations > 0 and FINDERS[call.name] then
        p.found = found_list(call, u)
        status = ('%s · %d location%s, :AgentdQuickfix'):format(
          status,
          #p.found.items,
          #p.found.items == 1 and '' or 's'
        )
      end
      call.final = u.status ~= 'running'
      set_call_status(call, status)
    end
  elseif kind == 'memory' then
    local names = {}
    for _, path in ipairs(u.docs or {}) do
      names[#names + 1] = vim.fs.basename(path)
    end
    chat.line(turn.r, ('- memory (%s, %s): %s'):format(u.point or '?', u.tier or '?', table.concat(names, ', ')))
  elseif kind == 'usage' then
    turn.usage = u
    if type(u.contextWindow) == 'number' and u.contextWindow > 0 then
      p.context = { tokens = u.contextTokens or 0, window = u.contextWindow }
    end
  elseif kind == 'compaction' then
    -- "started" gets a line that the outcome then replaces (the divider).
    if turn.compaction_key then
      chat.set_line(turn.compaction_key, compaction_line(u))
    else
      turn.compaction_key = chat.line(turn.r, compaction_line(u))
    end
    if u.status ~= 'started' then
      turn.compaction_key = nil
    end
    compaction_meter(p, u)
  elseif kind == 'plan' then
    show_plan(p, turn, type(u.entries) == 'table' and u.entries or {})
  elseif kind == 'user_message' and turn.replay then
    if turn.r then
      chat.finish(turn.r, 'ended')
    end
    turn.r = chat.begin_turn(u.text or '')
    turn.plan_key = nil
  elseif kind == 'user_image' and turn.replay then
    chat.line(turn.r, ('- image (%s, %d bytes)'):format(tostring(u.mimeType), math.floor(#(u.data or '') * 3 / 4)))
  elseif kind == 'prompt_end' and turn.replay then
    local label = tostring(u.stopReason or '?')
    if type(u.error) == 'table' then
      label = label .. ': ' .. tostring(u.error.message or u.error.kind)
    end
    chat.finish(turn.r, label)
  end
end

--- The session's mode changed (agent/setMode, from this editor or not).
local function on_mode(p, u)
  if p.setup then
    p.setup.mode = u.mode
  end
  local turn = p.turn and not p.turn.cancelled and p.turn or nil
  say(turn, 'mode: ' .. mode_name(p, u.mode))
end

M.handlers = {
  ['agent/update'] = function(_, params)
    if type(params) ~= 'table' or type(params.update) ~= 'table' then
      return
    end
    local p = by_session[params.sessionId]
    if not p then
      return
    end
    if params.update.kind == 'mode' then
      return on_mode(p, params.update)
    end
    -- agent/loadSession replays the session before it answers.
    if p.replay and p.replay.session_id == params.sessionId then
      return on_update(p, p.replay, params.update)
    end
    local turn = p.turn
    -- No live turn (or one not sent yet): the update belongs to a prompt
    -- this editor already cancelled, which the daemon is still winding down.
    if not turn or turn.cancelled or not turn.request_id then
      return
    end
    on_update(p, turn, params.update)
  end,
  ['agent/requestPermission'] = function(_, params)
    return M.request_permission(params)
  end,
  ['agent/elicit'] = function(_, params)
    return M.elicit(params)
  end,
  -- The MCP server says a URL question (a sign-in) is done. Its select was
  -- answered before the browser opened, so there is nothing left to close:
  -- a note in the chat says it.
  ['agent/elicitationComplete'] = function(_, params)
    local p = type(params) == 'table' and by_session[params.sessionId] or nil
    if p then
      local turn = p.turn and not p.turn.cancelled and p.turn or nil
      say(turn, 'the MCP server says the page you opened for it is done')
    end
  end,
  -- The memory index changed (an edit, an extraction): refresh the listing
  -- if it is shown, so it never goes stale.
  ['memory/changed'] = function(_, params)
    local buf = chat.find('agentd://memory')
    if buf and type(params) == 'table' and vim.b[buf].agentd_root == params.workspaceRoot then
      M.memory({ root = params.workspaceRoot, refresh = true })
    end
  end,
}

-- A cancelled request's -32800 reply never reaches a handler (Neovim's RPC
-- layer drops it) but it does end the request, which LspRequest reports:
-- that is when the daemon has finished the cancelled prompt.
api.nvim_create_autocmd('LspRequest', {
  group = api.nvim_create_augroup('agentd.requests', { clear = true }),
  callback = function(ev)
    local d = ev.data or {}
    if not d.request or d.request.type ~= 'complete' then
      return
    end
    for _, p in pairs(projects) do
      local b = p.cancel_wait
      if b and b.request_id == d.request_id and b.client_id == d.client_id then
        p.cancel_wait = nil
        unblock(p, 'cancel')
      end
      local turn = p.turn
      if turn and turn.request_id == d.request_id and turn.client_id == d.client_id then
        -- A live prompt's reply: its handler is scheduled before this check,
        -- so the turn is still here only when the reply was a -32800 that
        -- the RPC layer dropped: the daemon cancelled the prompt itself
        -- (`agent/cancel`). Nothing else would end the turn.
        vim.schedule(function()
          if p.turn == turn and turn.request_id == d.request_id then
            end_turn(p, turn, 'cancelled')
          end
        end)
      end
    end
  end,
})

-- --- turns -------------------------------------------------------------------------

local function send_prompt(p, turn, c, sid)
  local ok, id = c:request('agent/prompt', { sessionId = sid, prompt = turn.prompt }, function(err, result)
    if p.turn ~= turn then
      return -- a cancelled turn whose answer raced the cancel
    end
    if err then
      if err.code == ERR.busy and vim.uv.now() - turn.started < M.config.cancel_ack_timeout * 2 then
        -- The daemon is still finishing a prompt we cancelled (its
        -- acknowledgement did not come in time): try again shortly.
        turn.request_id = nil
        return vim.defer_fn(function()
          if p.turn == turn and not turn.cancelled then
            send_prompt(p, turn, c, sid)
          end
        end, 100)
      end
      if err.code == ERR.unknown_session then
        forget_session(p) -- the next prompt makes a new one
      end
      return end_turn(p, turn, 'error: ' .. errmsg(err))
    end
    result = type(result) == 'table' and result or {}
    local label = tostring(result.stopReason or '?')
    if type(result.error) == 'table' then
      label = label .. ': ' .. tostring(result.error.message or result.error.kind)
    end
    local usage = result.usage
    if type(usage) == 'table' and usage.inputTokens then
      label = ('%s · %d in / %d out tokens'):format(label, usage.inputTokens, usage.outputTokens or 0)
    end
    local meter = context_label(p)
    if meter then
      label = label .. ' · ' .. meter
    end
    end_turn(p, turn, label)
  end, chat.buf())
  if not ok or not id then
    return end_turn(p, turn, 'error: the agentd client has stopped')
  end
  turn.request_id = id
  turn.client_id = c.id
end

--- Ask a prompt in the project of the current buffer (or opts.root).
---@param prompt string|table text, or protocol content blocks
---@param opts {root?: string}|nil
---@return agentd.Turn|nil
function M.ask(prompt, opts)
  opts = opts or {}
  if prompt == nil or (type(prompt) == 'string' and vim.trim(prompt) == '') then
    notify('empty prompt', vim.log.levels.WARN)
    return
  end
  local p = project(opts.root or M.root())
  last_root = p.root
  if M.config.open_chat then
    chat.open(M.config.chat_position)
  end
  if p.turn then
    notify('a prompt is still running (:AgentdCancel stops it)', vim.log.levels.WARN)
    return
  end
  -- A daemon without slash commands would send `/compact` to the model as
  -- text; its agent/compact does what the command would.
  local compact_args = type(prompt) == 'string' and p.commands == false and prompt:match('^%s*/compact%f[%s%z](.*)$')
  if compact_args then
    return M.compact(vim.trim(compact_args), { root = p.root })
  end
  if vim.trim(chat.content()) == '' then
    chat.clear(header(p))
  end
  local shown = type(prompt) == 'string' and prompt or vim.json.encode(prompt)
  ---@type agentd.Turn
  local turn = { prompt = prompt, r = chat.begin_turn(shown), calls = {}, started = vim.uv.now() }
  p.turn = turn
  local function go()
    if p.turn ~= turn or turn.cancelled then
      return
    end
    with_session(p, function(c, sid, err)
      if p.turn ~= turn or turn.cancelled then
        return
      end
      if not c then
        return end_turn(p, turn, 'error: ' .. tostring(err))
      end
      send_prompt(p, turn, c, sid)
    end)
  end
  if next(p.blockers) then
    table.insert(p.after, go)
  else
    go()
  end
  return turn
end

--- Find the project a command is about: opts.root, else the current one,
--- else (the chat is shared) any project with a running prompt.
local function target(opts, want_turn)
  if opts and opts.root then
    return project(opts.root)
  end
  local p = project(M.root())
  if want_turn and not p.turn then
    for _, q in pairs(projects) do
      if q.turn then
        return q
      end
    end
  end
  return p
end

--- Cancel the running prompt. The chat shows it at once; the daemon is told
--- with $/cancelRequest, and the next prompt waits for its acknowledgement.
---@return boolean cancelled whether a prompt was running
function M.cancel(opts)
  local p = target(opts, true)
  local turn = p.turn
  if not turn then
    notify('no prompt is running')
    return false
  end
  turn.cancelled = true
  p.turn = nil
  -- Withdrawn: a question taken back, a running command killed with its
  -- process group (tools.run).
  for _, call in pairs(turn.calls) do
    withdraw(call)
    if not call.final then
      call.final = true
      set_call_status(call, 'cancelled')
    end
  end
  local c = turn.client_id and vim.lsp.get_client_by_id(turn.client_id)
  if c and turn.request_id and not c:is_stopped() then
    c:cancel_request(turn.request_id)
    local wait = { request_id = turn.request_id, client_id = c.id }
    p.cancel_wait = wait
    p.blockers.cancel = true
    -- Never wait forever for the acknowledgement (a busy reply is retried).
    vim.defer_fn(function()
      if p.cancel_wait == wait then
        p.cancel_wait = nil
        unblock(p, 'cancel')
      end
    end, M.config.cancel_ack_timeout)
  end
  end_turn(p, turn, 'cancelled')
  return true
end

--- Start a new session: the next prompt starts without history. The old
--- session stays in the daemon (persisted, as agent/listSessions shows).
function M.new_session(opts)
  local p = target(opts)
  last_root = p.root
  if p.turn then
    M.cancel({ root = p.root })
  end
  forget_session(p)
  chat.clear(header(p) .. ' · new session')
end

--- Reset the session: the daemon clears its history and counters.
function M.reset(opts, cb)
  local p = target(opts)
  last_root = p.root
  if p.turn then
    M.cancel({ root = p.root })
  end
  chat.clear(header(p) .. ' · session reset')
  local c = client_of(p)
  if not c or not p.session_id then
    if cb then
      cb(true)
    end
    return
  end
  p.blockers.reset = true
  c:request('agent/resetSession', { sessionId = p.session_id }, function(err)
    if err then
      if err.code == ERR.unknown_session then
        forget_session(p)
      else
        notify('reset failed: ' .. errmsg(err), vim.log.levels.ERROR)
      end
    end
    unblock(p, 'reset')
    if cb then
      cb(err == nil)
    end
  end, chat.buf())
end

--- Compact the session's history now (agent/compact): the older turns are
--- summarised, the newest kept. cb(result|nil, err).
---@param instructions string|nil what the summary should keep
function M.compact(instructions, opts, cb)
  local p = target(opts)
  last_root = p.root
  if p.turn then
    notify('a prompt is still running (:AgentdCancel stops it)', vim.log.levels.WARN)
    return cb and cb(nil, 'busy')
  end
  if not p.session_id then
    notify('no conversation to compact yet')
    return cb and cb(nil, 'no session')
  end
  with_session(p, function(c, sid, err)
    if not c then
      notify(tostring(err), vim.log.levels.ERROR)
      return cb and cb(nil, err)
    end
    local params = { sessionId = sid }
    if instructions and vim.trim(instructions) ~= '' then
      params.instructions = instructions
    end
    c:request('agent/compact', params, function(e, res)
      if e or type(res) ~= 'table' then
        chat.note('compaction failed: ' .. errmsg(e or 'no result'))
        return cb and cb(nil, e)
      end
      compaction_meter(p, res)
      chat.note(vim.trim((compaction_line(res):gsub('^%- ', ''))))
      if cb then
        cb(res)
      end
    end, chat.buf())
  end)
end

--- "context 63 %" for the project of the current buffer (or `root`), for
--- statuslines; nil before the daemon has reported it.
function M.context(root)
  local p = projects[vim.uv.fs_realpath(root or M.root()) or root or '']
  return p and context_label(p) or nil
end

-- --- permission, modes, models, sessions, commands -------------------------------------

--- agent/requestPermission: the daemon asks before a tool of its own with side
--- effects runs (an MCP tool not marked read-only). `auto_approve` decides
--- first (by the tool's name, `mcp__server__tool`), then the user's `confirm`
--- hook (as for client tools: yes allows once, no rejects), else
--- vim.ui.select offers the daemon's options. The answer has ACP's shape; anything but a choice is
--- `cancelled`, which the daemon takes as a refusal. Runs in the coroutine
--- Neovim gives server requests, so the reply waits for the user.
function M.request_permission(params)
  local cancelled = { outcome = { outcome = 'cancelled' } }
  if type(params) ~= 'table' or type(params.options) ~= 'table' then
    return cancelled
  end
  local options = vim.tbl_filter(function(o)
    return type(o) == 'table' and type(o.optionId) == 'string'
  end, params.options)
  local function pick(kind)
    for _, o in ipairs(options) do
      if o.kind == kind then
        return { outcome = { outcome = 'selected', optionId = o.optionId } }
      end
    end
    return cancelled
  end
  local p = by_session[params.sessionId]
  local turn = p and p.turn
  if not turn or turn.cancelled then
    -- No prompt of ours runs in that session (one just cancelled, or a
    -- session this editor does not know): nobody to ask.
    return cancelled
  end
  -- An MCP server's request to use the model is asked about every time:
  -- auto-approving its tool says nothing about what the server sends the model.
  local verdict = nil
  if params.kind ~= 'sampling' then
    verdict = tools.verdict(M.config, params.tool, params.arguments)
  end
  if verdict ~= nil then
    return pick(verdict and 'allow_once' or 'reject_once')
  end
  local co, is_main = coroutine.running()
  if not co or is_main or #options == 0 then
    return cancelled -- nowhere to wait for an answer: refuse
  end
  local call = turn.calls[params.toolCallId]
  local pending = {}
  function pending.finish(outcome)
    if pending.done then
      return -- withdrawn, or answered already
    end
    pending.done = true
    if call then
      call.withdraw = nil
    end
    -- Scheduled: a synchronous vim.ui.select answers before the yield below.
    vim.schedule(function()
      coroutine.resume(co, outcome)
    end)
  end
  -- Withdrawn (the prompt was cancelled, or the daemon withdrew the request:
  -- it sends `$/cancelRequest` and then the call's final `tool_call_update`,
  -- which lands here): answered `cancelled`, and the picker is closed, so no
  -- stale question waits for the user. A late choice answers nothing.
  function pending.withdraw()
    pending.finish({ outcome = 'cancelled' })
    if pending.close then
      pending.close()
    end
  end
  if call then
    call.withdraw = pending.withdraw
    set_call_status(call, 'awaiting permission')
  end
  local question = tools.permission_question(params)
  if type(M.config.confirm) == 'function' then
    -- The user's own question, as for client tools: yes is the daemon's
    -- "allow once", no its "reject once" (or no answer, which refuses).
    pending.close = tools.ask_confirm(M.config.confirm, params.tool, params.arguments, question, function(yes)
      local chosen = pick(yes and 'allow_once' or 'reject_once')
      pending.finish(chosen.outcome)
    end)
  else
    pending.close = picker.select_closable(options, {
      prompt = question,
      kind = 'agentd_permission',
      format_item = function(o)
        return o.name or o.optionId
      end,
    }, function(choice)
      pending.finish(choice and { outcome = 'selected', optionId = choice.optionId } or { outcome = 'cancelled' })
    end)
  end
  local outcome = coroutine.yield()
  if call and not call.final then
    local chosen = outcome.outcome == 'selected' and outcome.optionId or nil
    for _, o in ipairs(options) do
      if o.optionId == chosen and o.kind and o.kind:match('^reject') then
        chosen = nil
      end
    end
    set_call_status(call, chosen and 'running' or 'rejected')
  end
  return { outcome = outcome }
end

--- agent/elicit: an MCP server asks the user during a tool call of the
--- running prompt (lua/agentd/elicit.lua asks it). Modelled on
--- request_permission: it runs in the coroutine Neovim gives server
--- requests, and a cancelled prompt or the call's final update (the daemon
--- withdrew the question) closes what is open and answers `cancel`. A
--- question this plugin cannot read is `decline`; one of no prompt of ours,
--- `cancel`.
function M.elicit(params)
  if type(params) ~= 'table' or (params.mode ~= 'form' and params.mode ~= 'url') then
    return elicit.DECLINE
  end
  local p = by_session[params.sessionId]
  local turn = p and p.turn
  if not turn or turn.cancelled then
    return elicit.CANCEL
  end
  local co, is_main = coroutine.running()
  if not co or is_main then
    return elicit.DECLINE -- nowhere to wait for an answer
  end
  local call = turn.calls[params.toolCallId]
  local pending = elicit.pending(co)
  if call then
    call.withdraw = pending.withdraw
    set_call_status(call, 'asking you')
  end
  local result = elicit.run(params, pending)
  local withdrawn = pending.done
  pending.done = true
  if call and call.withdraw == pending.withdraw then
    call.withdraw = nil
  end
  if call and not call.final and not withdrawn then
    set_call_status(call, 'running')
  end
  return withdrawn and elicit.CANCEL or result
end

--- Call fn(p, c, sid) with the project's session and its setup (modes,
--- models); says so and calls cb(nil, err) when there is none.
local function with_setup(opts, cb, fn)
  local p = target(opts)
  last_root = p.root
  with_session(p, function(c, sid, err)
    if not c then
      notify(tostring(err), vim.log.levels.ERROR)
      return cb and cb(nil, err)
    end
    if not p.setup then
      notify('this agentd offers no session modes or models (it is older than this plugin)', vim.log.levels.WARN)
      return cb and cb(nil, 'unsupported')
    end
    fn(p, c, sid)
  end)
end

--- Switch the session's mode (agent/setMode): `ask`, `code` or `auto-edit`;
--- without {mode}, pick one with vim.ui.select. cb(result|nil, err).
function M.set_mode(mode, opts, cb)
  with_setup(opts, cb, function(p, c, sid)
    local function apply(id)
      c:request('agent/setMode', { sessionId = sid, mode = id }, function(e, res)
        if e or type(res) ~= 'table' then
          notify('agent/setMode failed: ' .. errmsg(e or 'no result'), vim.log.levels.ERROR)
          return cb and cb(nil, e)
        end
        p.setup.mode = res.mode or id
        if cb then
          cb(res)
        end
      end, chat.buf())
    end
    if mode and mode ~= '' then
      return apply(mode)
    end
    local now = p.setup.mode
    vim.ui.select(p.setup.modes, {
      prompt = 'agentd mode',
      kind = 'agentd_mode',
      format_item = function(m)
        local current = m.id == now and ' (current)' or ''
        return ('%s%s — %s'):format(m.name or m.id, current, m.description or '')
      end,
    }, function(choice)
      if choice then
        apply(choice.id)
      elseif cb then
        cb(nil, 'none chosen')
      end
    end)
  end)
end

--- Switch the session's model (agent/setModel) among the configured ones
--- (`models` in the daemon's settings); without {model}, pick one with
--- vim.ui.select. cb(result|nil, err).
function M.set_model(model, opts, cb)
  with_setup(opts, cb, function(p, c, sid)
    local function apply(id)
      c:request('agent/setModel', { sessionId = sid, model = id }, function(e, res)
        if e or type(res) ~= 'table' then
          notify('agent/setModel failed: ' .. errmsg(e or 'no result'), vim.log.levels.ERROR)
          return cb and cb(nil, e)
        end
        p.setup.model = res.model or id
        say(p.turn, 'model: ' .. tostring(p.setup.model))
        if cb then
          cb(res)
        end
      end, chat.buf())
    end
    if model and model ~= '' then
      return apply(model)
    end
    local now = p.setup.model
    vim.ui.select(p.setup.models, {
      prompt = 'agentd model',
      kind = 'agentd_model',
      format_item = function(m)
        local name = (m.name and m.name ~= m.id) and (m.name .. ' (' .. m.id .. ')') or m.id
        return name .. (m.supportsImages and ' · images' or '') .. (m.id == now and ' (current)' or '')
      end,
    }, function(choice)
      if choice then
        apply(choice.id)
      elseif cb then
        cb(nil, 'none chosen')
      end
    end)
  end)
end

--- Load a saved session (agent/loadSession): the chat shows its history as
--- the daemon replays it, and the next prompt goes on from there.
--- cb(result|nil, err).
function M.load_session(session_id, opts, cb)
  local p = target(opts)
  last_root = p.root
  if p.turn then
    M.cancel({ root = p.root })
  end
  with_client(p, function(c, err)
    if not c then
      notify(tostring(err), vim.log.levels.ERROR)
      return cb and cb(nil, err)
    end
    forget_session(p)
    if M.config.open_chat then
      chat.open(M.config.chat_position)
    end
    chat.clear(header(p) .. ' · session ' .. ((opts or {}).title or session_id))
    local replay = { replay = true, session_id = session_id, calls = {} }
    p.replay = replay
    by_session[session_id] = p
    c:request('agent/loadSession', { sessionId = session_id, workspaceRoot = p.root }, function(e, res)
      if p.replay == replay then
        p.replay = nil
      end
      if replay.r and not replay.r.finished then
        chat.finish(replay.r, 'ended')
      end
      if e then
        by_session[session_id] = nil
        chat.note('could not load the session: ' .. errmsg(e))
        return cb and cb(nil, e)
      end
      p.session_id = session_id
      keep_setup(p, res)
      keep_roots(p, res)
      if type(res) == 'table' and type(res.plan) == 'table' then
        p.plan = res.plan
      end
      local note = 'session loaded'
      if p.setup then
        note = ('%s · mode %s · model %s'):format(note, mode_name(p, p.setup.mode), tostring(p.setup.model))
      end
      chat.note(note)
      if cb then
        cb(res or {})
      end
    end, chat.buf())
  end)
end

local SESSION_ACTIONS = {
  { action = 'open', label = 'Open' },
  { action = 'fork', label = 'Fork: a new session from a copy of it' },
  { action = 'delete', label = 'Delete…' },
}

--- Fork a saved session (agent/forkSession) and load the fork into the
--- chat; the source stays as it was. cb(result|nil, err) as for load_session.
local function fork_session(p, c, session, cb)
  c:request('agent/forkSession', { sessionId = session.sessionId, workspaceRoot = p.root }, function(e, res)
    if e or type(res) ~= 'table' or type(res.sessionId) ~= 'string' then
      notify('agent/forkSession failed: ' .. errmsg(e or 'no result'), vim.log.levels.ERROR)
      return cb and cb(nil, e or 'no result')
    end
    M.load_session(res.sessionId, { root = p.root, title = 'fork of ' .. (session.title or '') }, cb)
  end, chat.buf())
end

--- Delete a saved session (agent/deleteSession) once the user confirms it in
--- vim.ui.select. The chat showing it is cleared. cb({deleted}|nil, err).
local function delete_session(p, c, session, cb)
  local title = (type(session.title) == 'string' and session.title ~= '') and session.title or '(untitled)'
  vim.ui.select({ 'Delete', 'Keep' }, {
    prompt = ('Delete the session "%s"? Its transcript is removed.'):format((title:gsub('\n', ' '))),
    kind = 'agentd_confirm',
  }, function(choice)
    if choice ~= 'Delete' then
      return cb and cb(nil, 'kept')
    end
    c:request('agent/deleteSession', { sessionId = session.sessionId }, function(e, res)
      if e then
        notify('agent/deleteSession failed: ' .. errmsg(e), vim.log.levels.ERROR)
        return cb and cb(nil, e)
      end
      if p.session_id == session.sessionId then
        -- The chat showed the deleted session: the next prompt starts a new one.
        forget_session(p)
        chat.clear(header(p))
      end
      notify('deleted the session ' .. title)
      if cb then
        cb({ deleted = type(res) == 'table' and res.deleted or false })
      end
    end, chat.buf())
  end)
end

--- The project's saved sessions (agent/listSessions) in vim.ui.select; the
--- one picked is opened (loaded), forked (the fork loaded) or deleted (after
--- a confirmation), as picked in a second vim.ui.select, or as
--- `opts.action` ('open', 'fork', 'delete') says. cb(result|nil, err) as for
--- load_session.
function M.sessions(opts, cb)
  local p = target(opts)
  last_root = p.root
  local action = (opts or {}).action
  with_client(p, function(c, err)
    if not c then
      notify(tostring(err), vim.log.levels.ERROR)
      return cb and cb(nil, err)
    end
    c:request('agent/listSessions', { workspaceRoot = p.root }, function(e, res)
      if e or type(res) ~= 'table' then
        notify('agent/listSessions failed: ' .. errmsg(e or 'no result'), vim.log.levels.ERROR)
        return cb and cb(nil, e)
      end
      local sessions = type(res.sessions) == 'table' and res.sessions or {}
      if #sessions == 0 then
        notify('no saved sessions for ' .. p.root)
        return cb and cb(nil, 'none')
      end
      local function act(choice, what)
        if what == 'fork' then
          fork_session(p, c, choice, cb)
        elseif what == 'delete' then
          delete_session(p, c, choice, cb)
        else
          M.load_session(choice.sessionId, { root = p.root, title = choice.title }, cb)
        end
      end
      vim.ui.select(sessions, {
        prompt = 'agentd sessions',
        kind = 'agentd_session',
        format_item = function(s)
          local title = (type(s.title) == 'string' and s.title ~= '') and s.title or '(untitled)'
          local current = s.sessionId == p.session_id and ' (current)' or ''
          return ('%s  %s%s'):format(tostring(s.updatedAt or ''), (title:gsub('\n', ' ')), current)
        end,
      }, function(choice)
        if not choice then
          return cb and cb(nil, 'none chosen')
        end
        if action then
          return act(choice, action)
        end
        vim.ui.select(SESSION_ACTIONS, {
          prompt = 'agentd session',
          kind = 'agentd_session_action',
          format_item = function(a)
            return a.label
          end,
        }, function(picked)
          if not picked then
            return cb and cb(nil, 'none chosen')
          end
          act(choice, picked.action)
        end)
      end)
    end, chat.buf())
  end)
end

--- Completion of :AgentdAsk: the daemon's slash commands, when the prompt
--- so far is a slash and a partial name.
function M.complete_ask(arglead, cmdline)
  local typed = cmdline:match('^%s*%S+%s+(.*)$') or ''
  if not typed:match('^/%S*$') then
    return {}
  end
  local p = projects[M.root()]
  local out = {}
  for _, cmd in ipairs(p and p.commands or {}) do
    local name = '/' .. tostring(cmd.name)
    if name:sub(1, #arglead) == arglead then
      out[#out + 1] = name
    end
  end
  return out
end

--- Completion of :AgentdMode and :AgentdModel: the session's choices.
function M.complete_setup(what, arglead)
  local p = projects[M.root()]
  local out = {}
  for _, m in ipairs(p and p.setup and p.setup[what] or {}) do
    if tostring(m.id):sub(1, #arglead) == arglead then
      out[#out + 1] = m.id
    end
  end
  return out
end

-- --- memory --------------------------------------------------------------------------

local function show_memory(p, res)
  local buf = chat.find('agentd://memory')
  if not buf then
    buf = api.nvim_create_buf(true, true)
    api.nvim_buf_set_name(buf, 'agentd://memory')
    vim.bo[buf].buftype = 'nofile'
    vim.bo[buf].bufhidden = 'hide'
    vim.bo[buf].swapfile = false
    vim.bo[buf].filetype = 'markdown'
    vim.keymap.set('n', '<CR>', function()
      local path = (vim.b[buf].agentd_paths or {})[tostring(api.nvim_win_get_cursor(0)[1])]
      if path then
        vim.cmd.edit(vim.fn.fnameescape(path))
      end
    end, { buffer = buf, desc = 'agentd: open the memory file (or folder) under the cursor' })
  end
  local lines = {
    '# agentd memory · ' .. p.root,
    '',
    res.directory or '?',
    '',
  }
  -- Keys are strings: a b: variable holding a Lua list with holes would be
  -- converted to a Vim list and lose rows.
  local paths = { [tostring(3)] = res.directory }
  local docs = res.docs or {}
  if #docs == 0 then
    lines[#lines + 1] = '(no memories yet)'
  end
  for _, d in ipairs(docs) do
    lines[#lines + 1] = ('- **%s** [%s]%s — %s'):format(
      d.name or vim.fs.basename(d.path or '?'),
      d.type or '?',
      d.team and ' (team)' or '',
      d.description or ''
    )
    paths[tostring(#lines)] = d.path
  end
  lines[#lines + 1] = ''
  lines[#lines + 1] = '<CR> opens the file or the folder under the cursor.'
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.b[buf].agentd_paths = paths
  vim.b[buf].agentd_root = p.root
  return buf
end

--- List the project's memories (memory/list) in `agentd://memory`; with
--- opts.folder, open the memory folder itself. cb(result|nil, err).
function M.memory(opts, cb)
  opts = opts or {}
  local p = target(opts)
  with_client(p, function(c, err)
    if not c then
      notify(err, vim.log.levels.ERROR)
      return cb and cb(nil, err)
    end
    c:request('memory/list', { workspaceRoot = p.root }, function(e, res)
      if e or type(res) ~= 'table' then
        notify('memory/list failed: ' .. errmsg(e), vim.log.levels.ERROR)
        return cb and cb(nil, e)
      end
      local buf = show_memory(p, res)
      if opts.folder and res.directory then
        vim.fn.mkdir(res.directory, 'p')
        vim.cmd.edit(vim.fn.fnameescape(res.directory))
      elseif not opts.refresh and #vim.fn.win_findbuf(buf) == 0 then
        vim.cmd('botright split')
        api.nvim_win_set_buf(0, buf)
      end
      if cb then
        cb(res)
      end
    end, chat.buf())
  end)
end

local function format_status(p, res, c)
  local lines = { 'agentd · ' .. p.root }
  local caps = c and vim.tbl_get(c.server_capabilities or {}, 'experimental', 'agentd') or {}
  lines[#lines + 1] = ('daemon %s, protocol %s, session %s'):format(
    tostring(caps.version or '?'),
    tostring(caps.protocolVersion or '?'),
    p.session_id or 'none yet'
  )
  if p.setup then
    lines[#lines + 1] = ('mode %s, model %s'):format(mode_name(p, p.setup.mode), tostring(p.setup.model))
  end
  lines[#lines + 1] = ('memory: %s (%s docs, watcher %s)'):format(
    tostring(res.directory),
    tostring(res.docCount),
    type(res.watcher) == 'table' and vim.json.encode(res.watcher) or tostring(res.watcher)
  )
  local ex = type(res.extraction) == 'table' and res.extraction or {}
  lines[#lines + 1] = ('extraction: %s%s, last run %s%s'):format(
    tostring(ex.state or '?'),
    ex.trailingPending and ' (a run is pending)' or '',
    ex.lastRunAt ~= nil and ex.lastRunAt ~= vim.NIL and tostring(ex.lastRunAt) or 'never',
    ex.lastError ~= nil and ex.lastError ~= vim.NIL and (', last error: ' .. tostring(ex.lastError)) or ''
  )
  if res.deliveries ~= nil then
    lines[#lines + 1] = 'deliveries: ' .. vim.json.encode(res.deliveries)
  end
  for _, pr in ipairs(res.problems or {}) do
    lines[#lines + 1] = ('problem: %s: %s'):format(tostring(pr.path), tostring(pr.problem))
  end
  return lines
end

--- The MCP part of :AgentdStatus, from mcp/status (nil: no MCP in the daemon).
local function mcp_lines(res)
  if res == nil then
    return {}
  end
  if type(res) ~= 'table' or res.error then
    return { 'MCP: mcp/status failed: ' .. tostring(type(res) == 'table' and res.error or res) }
  end
  local servers = type(res.servers) == 'table' and res.servers or {}
  if #servers == 0 then
    return { 'MCP: no servers configured' }
  end
  local lines = { ('MCP: %d server%s'):format(#servers, #servers == 1 and '' or 's') }
  for _, sv in ipairs(servers) do
    local line = ('  %s: %s (%s, %s tool%s'):format(
      tostring(sv.name),
      tostring(sv.state),
      tostring(sv.transport),
      tostring(sv.toolCount or 0),
      sv.toolCount == 1 and '' or 's'
    )
    if (sv.restarts or 0) > 0 then
      line = line .. (', %d restart%s'):format(sv.restarts, sv.restarts == 1 and '' or 's')
    end
    line = line .. ')'
    if type(sv.lastError) == 'string' and sv.lastError ~= '' then
      line = line .. ' — last error: ' .. (sv.lastError:match('^[^\n]*') or '')
    end
    lines[#lines + 1] = line
  end
  return lines
end

--- Show memory/status (and mcp/status) for the project. cb(result|nil, err,
--- lines, mcp_result).
function M.status(opts, cb)
  local p = target(opts)
  with_client(p, function(c, err)
    if not c then
      notify(err, vim.log.levels.ERROR)
      return cb and cb(nil, err)
    end
    c:request('memory/status', { workspaceRoot = p.root }, function(e, res)
      if e or type(res) ~= 'table' then
        notify('memory/status failed: ' .. errmsg(e), vim.log.levels.ERROR)
        return cb and cb(nil, e)
      end
      local lines = format_status(p, res, c)
      local function done(mcp)
        vim.list_extend(lines, mcp_lines(mcp))
        notify(table.concat(lines, '\n'))
        if cb then
          cb(res, nil, lines, mcp)
        end
      end
      -- MCP servers only from a daemon that has them (`mcp` in its capabilities).
      if not vim.tbl_get(c.server_capabilities or {}, 'experimental', 'agentd', 'mcp') then
        return done(nil)
      end
      c:request('mcp/status', vim.empty_dict(), function(me, mres)
        done(me and { error = errmsg(me) } or mres)
      end, chat.buf())
    end, chat.buf())
  end)
end

--- Put the locations of the last search or glob into the quickfix list and
--- open it. Returns the number of items (0: there was none yet).
function M.quickfix(opts)
  opts = opts or {}
  local p = target(opts)
  if not p or not p.found then
    notify('no search or glob results yet', vim.log.levels.WARN)
    return 0
  end
  vim.fn.setqflist({}, ' ', { title = p.found.title, items = p.found.items })
  if opts.open ~= false then
    vim.cmd('botright copen')
  end
  return #p.found.items
end

--- What the plugin knows, for tests and :checkhealth.
function M.info(root)
  local p = root and projects[vim.uv.fs_realpath(root) or root]
  if not p then
    return nil
  end
  return {
    root = p.root,
    client_id = p.client_id,
    session_id = p.session_id,
    running = p.turn ~= nil,
    request_id = p.turn and p.turn.request_id,
    waiting = next(p.blockers) ~= nil,
    last_stop = p.last_stop,
    context = p.context and vim.deepcopy(p.context) or nil,
    mode = p.setup and p.setup.mode or nil,
    model = p.setup and p.setup.model or nil,
    plan = p.plan and vim.deepcopy(p.plan) or nil,
    commands = type(p.commands) == 'table' and vim.deepcopy(p.commands) or p.commands,
  }
end

function M.open_chat()
  chat.open(M.config.chat_position)
end

return M
