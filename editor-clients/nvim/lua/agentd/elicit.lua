-- agent/elicit: an MCP server's question to the user in the middle of a tool
-- call (docs/protocol.md). A form is asked one property at a time
-- (vim.ui.select for choices, booleans and multi-select; vim.ui.input,
-- checked here against the schema, for text and numbers); a URL is an
-- Open / Decline select, then vim.ui.open. Dismissing any step answers
-- `cancel`; what this plugin cannot read answers `decline`. The daemon checks
-- the answer against the schema again (a mismatch is `decline` for the
-- server), so these checks only spare the user a wasted answer.
local picker = require('agentd.picker')

local M = {}

M.CANCEL = { action = 'cancel' }
M.DECLINE = { action = 'decline' }

--- What is wrong with `text` for the property (shown when asking again), or nil.
function M.problem(text, prop, required)
  if text == '' then
    return required and 'a value is required' or nil
  end
  if prop.type == 'string' then
    local n = vim.str_utfindex(text, 'utf-32')
    if type(prop.minLength) == 'number' and n < prop.minLength then
      return ('at least %d characters'):format(prop.minLength)
    end
    if type(prop.maxLength) == 'number' and n > prop.maxLength then
      return ('at most %d characters'):format(prop.maxLength)
    end
    return nil
  end
  local value = tonumber(vim.trim(text))
  if not value or value ~= value or value == math.huge or value == -math.huge then
    return 'a number is required'
  end
  if prop.type == 'integer' and value ~= math.floor(value) then
    return 'a whole number is required'
  end
  if type(prop.minimum) == 'number' and value < prop.minimum then
    return ('at least %s'):format(prop.minimum)
  end
  if type(prop.maximum) == 'number' and value > prop.maximum then
    return ('at most %s'):format(prop.maximum)
  end
  return nil
end

--- The choices of a property (`enum`, with `enumNames`, or `oneOf` / `anyOf`
--- of `{const, title}`) as { label, value } items; nil when it has none.
function M.choices(prop)
  if type(prop) ~= 'table' then
    return nil
  end
  if type(prop.enum) == 'table' then
    local names = type(prop.enumNames) == 'table' and prop.enumNames or {}
    local out = {}
    for i, v in ipairs(prop.enum) do
      out[i] = { label = type(names[i]) == 'string' and names[i] or tostring(v), value = v }
    end
    return out
  end
  local options = type(prop.oneOf) == 'table' and prop.oneOf or type(prop.anyOf) == 'table' and prop.anyOf or nil
  if not options then
    return nil
  end
  local out = {}
  for _, o in ipairs(options) do
    if type(o) == 'table' and o.const ~= nil then
      out[#out + 1] = { label = type(o.title) == 'string' and o.title or tostring(o.const), value = o.const }
    end
  end
  return out
end

--- The state of one question, for the coroutine that waits on its steps.
--- pending.ask(open) opens a step (open(cb) shows it and returns a closer)
--- and yields until cb(value) or a withdrawal: value, or nil plus true when
--- withdrawn. A step's late answer (after a withdrawal or a later step) is
--- ignored.
function M.pending(co)
  local pending = { step = 0 }
  function pending.ask(open)
    if pending.done then
      return nil, true
    end
    pending.step = pending.step + 1
    local step = pending.step
    local answered = false
    pending.close = open(function(value)
      if pending.done or answered or step ~= pending.step then
        return
      end
      answered = true
      -- Scheduled: a synchronous vim.ui.select answers before the yield below.
      vim.schedule(function()
        coroutine.resume(co, { value = value })
      end)
    end)
    local r = coroutine.yield()
    pending.close = nil
    if r.withdrawn or pending.done then
      return nil, true
    end
    return r.value
  end
  --- The prompt was cancelled or the daemon withdrew the question: the open
  --- step is closed and the coroutine answers `cancel`.
  function pending.withdraw()
    if pending.done then
      return
    end
    pending.done = true
    if pending.close then
      pcall(pending.close)
    end
    vim.schedule(function()
      coroutine.resume(co, { withdrawn = true })
    end)
  end
  return pending
end

local function select(pending, items, opts)
  return pending.ask(function(cb)
    return picker.select_closable(items, opts, function(item)
      cb(item or false)
    end)
  end)
end

local function server_of(params)
  return type(params.server) == 'string' and params.server ~= '' and params.server or 'an MCP server'
end

local function message_of(params)
  return type(params.message) == 'string' and params.message or ''
end

--- URL mode: Open or Decline; Open hands the URL to vim.ui.open (Neovim 0.10+).
local function ask_url(params, pending)
  local url = params.url
  if type(url) ~= 'string' or not (url:match('^[Hh][Tt][Tt][Pp][Ss]?://')) then
    return M.DECLINE
  end
  local items = { { label = 'Open', action = 'accept' }, { label = 'Decline', action = 'decline' } }
  local prompt = ('%s asks you to open %s (%s)'):format(server_of(params), url, message_of(params))
  local choice, withdrawn = select(pending, items, {
    prompt = prompt,
    kind = 'agentd_elicit_url',
    format_item = function(i)
      return i.label
    end,
  })
  if withdrawn or not choice then
    return M.CANCEL
  end
  if choice.action ~= 'accept' then
    return M.DECLINE
  end
  if vim.ui.open then
    vim.ui.open(url)
  end
  return { action = 'accept' }
end

local SKIP = {}
local DISMISSED = {}

--- One property: its value, SKIP (an optional one left out), DISMISSED
--- (dismissed or withdrawn) or nil (a shape this plugin cannot ask).
local function ask_property(name, prop, required, header, pending)
  local label = type(prop.title) == 'string' and prop.title ~= '' and prop.title or name
  if type(prop.description) == 'string' and prop.description ~= '' then
    label = label .. ' (' .. prop.description .. ')'
  end
  if not required then
    label = label .. ' [optional]'
  end
  local function fmt(i)
    return i.label
  end
  if prop.type == 'array' then
    local items = M.choices(prop.items)
    if not items then
      return nil
    end
    -- vim.ui.select picks one item: each pick toggles one, "Done" ends.
    local chosen = {}
    while true do
      local shown = { { label = 'Done', done = true } }
      for _, it in ipairs(items) do
        shown[#shown + 1] = { label = (chosen[it] and '[x] ' or '[ ] ') .. it.label, item = it }
      end
      local pick, withdrawn = select(pending, shown, { prompt = header .. label, kind = 'agentd_elicit_multi', format_item = fmt })
      if withdrawn or not pick then
        return DISMISSED
      end
      if pick.done then
        break
      end
      chosen[pick.item] = not chosen[pick.item] or nil
    end
    local values = {}
    for _, it in ipairs(items) do
      if chosen[it] then
        values[#values + 1] = it.value
      end
    end
    return values -- an empty table is `[]` in vim.json
  end
  local choices = M.choices(prop)
  if prop.type == 'boolean' or choices then
    local items = choices or { { label = 'Yes', value = true }, { label = 'No', value = false } }
    items = vim.list_extend({}, items)
    if not required then
      items[#items + 1] = { label = '(skip)', skip = true }
    end
    local pick, withdrawn = select(pending, items, { prompt = header .. label, kind = 'agentd_elicit', format_item = fmt })
    if withdrawn or not pick then
      return DISMISSED
    end
    return pick.skip and SKIP or pick.value
  end
  if prop.type ~= 'string' and prop.type ~= 'number' and prop.type ~= 'integer' then
    return nil
  end
  local default = (type(prop.default) == 'string' or type(prop.default) == 'number') and tostring(prop.default) or nil
  local problem
  while true do
    local prompt = header .. label .. (problem and (' - ' .. problem) or '') .. ': '
    local text, withdrawn = pending.ask(function(cb)
      return picker.input_closable({ prompt = prompt, default = default }, function(input)
        cb(input or false)
      end)
    end)
    if withdrawn or not text then
      return DISMISSED
    end
    problem = M.problem(text, prop, required)
    if not problem then
      if text == '' then
        return SKIP
      end
      return prop.type == 'string' and text or tonumber(vim.trim(text))
    end
    default = text
  end
end

--- Form mode: each property in turn; the content has the schema's types.
local function ask_form(params, pending)
  local schema = params.requestedSchema
  if type(schema) ~= 'table' or type(schema.properties) ~= 'table' or vim.islist(schema.properties) then
    return M.DECLINE
  end
  local required = {}
  for _, r in ipairs(type(schema.required) == 'table' and schema.required or {}) do
    required[r] = true
  end
  -- JSON object order is lost in a Lua table: the required ones first, then by name.
  local names = vim.tbl_keys(schema.properties)
  table.sort(names, function(a, b)
    if (required[a] or false) ~= (required[b] or false) then
      return required[a] == true
    end
    return a < b
  end)
  local content = vim.empty_dict()
  for i, name in ipairs(names) do
    local prop = schema.properties[name]
    if type(prop) ~= 'table' then
      return M.DECLINE
    end
    local header = ('%s: %s (%d/%d) '):format(server_of(params), message_of(params), i, #names)
    local value = ask_property(name, prop, required[name] == true, header, pending)
    if value == nil then
      return M.DECLINE
    elseif value == DISMISSED or pending.done then
      return M.CANCEL
    elseif value ~= SKIP then
      content[name] = value
    end
  end
  return { action = 'accept', content = content }
end

--- Ask the question of `params` (the caller checked the mode) through
--- `pending`; the answer is an ElicitResult.
function M.run(params, pending)
  if params.mode == 'url' then
    return ask_url(params, pending)
  end
  return ask_form(params, pending)
end

return M
