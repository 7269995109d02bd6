-- The chat buffer `agentd://chat`: a markdown log of the turns, written only
-- by this module (the buffer is 'nomodifiable' so that stray keys cannot
-- shift the rows that tool lines are updated at).
local api = vim.api

local M = {}

M.name = 'agentd://chat'
local ns = api.nvim_create_namespace('agentd.chat')
local bufnr ---@type integer?

--- The buffer whose full name is `name`, if any. (bufnr() takes a file
--- pattern, where a name's characters would need escaping.)
function M.find(name)
  for _, b in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_get_name(b) == name then
      return b
    end
  end
end

--- The chat buffer, created on first use.
---@return integer
function M.buf()
  if bufnr and api.nvim_buf_is_valid(bufnr) then
    return bufnr
  end
  -- A buffer of that name may survive from an earlier load of the plugin.
  local existing = M.find(M.name)
  bufnr = existing or api.nvim_create_buf(true, true)
  if not existing then
    api.nvim_buf_set_name(bufnr, M.name)
  end
  local bo = vim.bo[bufnr]
  bo.buftype = 'nofile' -- never written, no "unsaved changes" prompt on :qa
  bo.bufhidden = 'hide' -- keep the log when its window closes
  bo.swapfile = false
  bo.filetype = 'markdown'
  bo.modifiable = false
  return bufnr
end

--- Run `fn` with the chat buffer modifiable, then follow the end of the log
--- in every window that shows it.
local function write(fn)
  local buf = M.buf()
  vim.bo[buf].modifiable = true
  local ok, err = pcall(fn, buf)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  if not ok then
    error(err)
  end
  local last = api.nvim_buf_line_count(buf)
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    api.nvim_win_set_cursor(win, { last, 0 })
  end
end

local function last_line(buf)
  local n = api.nvim_buf_line_count(buf)
  return n, api.nvim_buf_get_lines(buf, n - 1, n, false)[1]
end

--- Append whole lines after the last line (an empty buffer's only line is reused).
local function append_lines(buf, lines)
  local n, last = last_line(buf)
  if n == 1 and last == '' then
    api.nvim_buf_set_lines(buf, 0, 1, false, lines)
  else
    api.nvim_buf_set_lines(buf, n, n, false, lines)
  end
  return api.nvim_buf_line_count(buf) - #lines
end

--- Drop trailing empty lines, so that what follows is spaced evenly.
local function trim(buf)
  local n = api.nvim_buf_line_count(buf)
  local keep = n
  while keep > 1 and api.nvim_buf_get_lines(buf, keep - 1, keep, false)[1] == '' do
    keep = keep - 1
  end
  if keep < n then
    api.nvim_buf_set_lines(buf, keep, n, false, {})
  end
end

--- Show the chat buffer in a window (unless one already shows it).
---@param position string|nil an Ex command opening a window, e.g. 'botright vsplit'
function M.open(position)
  local buf = M.buf()
  if #vim.fn.win_findbuf(buf) > 0 then
    return
  end
  local cur = api.nvim_get_current_win()
  vim.cmd(position or 'botright vsplit')
  api.nvim_win_set_buf(0, buf)
  vim.wo.wrap = true
  vim.wo.linebreak = true
  api.nvim_win_set_cursor(0, { api.nvim_buf_line_count(buf), 0 })
  -- Keep the user where they were: the chat follows by itself.
  api.nvim_set_current_win(cur)
end

--- Replace the whole log with a header (new session, reset).
function M.clear(header)
  write(function(buf)
    api.nvim_buf_clear_namespace(buf, ns, 0, -1)
    api.nvim_buf_set_lines(buf, 0, -1, false, { header })
  end)
end

--- Start a turn: the user's prompt, then the heading the answer streams under.
--- Returns the render state that the other functions take.
function M.begin_turn(prompt)
  local r = { mode = nil }
  write(function(buf)
    trim(buf)
    local lines = { '', '## You', '' }
    vim.list_extend(lines, vim.split(prompt, '\n', { plain = true }))
    -- The last empty line is where the answer starts (see `stream`).
    vim.list_extend(lines, { '', '## agentd', '', '' })
    append_lines(buf, lines)
  end)
  return r
end

-- Streamed text is appended to the last line; a line break in a chunk opens
-- new lines. Thoughts are quoted ("> ") so that they read apart from the answer.
local function stream(r, kind, text)
  write(function(buf)
    if r.mode ~= kind then
      -- Leaving a block of tool/memory lines (or the other stream): a blank
      -- line keeps markdown from gluing the paragraphs together.
      local _, last = last_line(buf)
      local start = kind == 'thought' and '> ' or ''
      if last == '' and r.mode == 'section' then
        append_lines(buf, { start }) -- (the empty line that ends a section stays)
      elseif last == '' then
        local n = api.nvim_buf_line_count(buf)
        api.nvim_buf_set_lines(buf, n - 1, n, false, { start })
      else
        append_lines(buf, { '', start })
      end
      r.mode = kind
    end
    local parts = vim.split(text, '\n', { plain = true })
    if kind == 'thought' then
      for i = 2, #parts do
        parts[i] = '> ' .. parts[i]
      end
    end
    local n, last = last_line(buf)
    api.nvim_buf_set_text(buf, n - 1, #last, n - 1, #last, parts)
  end)
end

function M.text(r, text)
  stream(r, 'message', text)
end

function M.thought(r, text)
  stream(r, 'thought', text)
end

--- Append one line of a block (tool call, memory delivery). Returns a key
--- for `set_line`, backed by an extmark so the row is found again later.
function M.line(r, text)
  local key
  write(function(buf)
    local n, last = last_line(buf)
    local row
    if r.mode == 'block' or (r.mode == 'section' and last == '') then
      -- (after a section, the empty line that ends it stays)
      row = append_lines(buf, { text })
    elseif last == '' then
      row = n - 1
      api.nvim_buf_set_lines(buf, row, row + 1, false, { text })
    else
      -- Leaving streamed text: a blank line, or markdown would glue the
      -- list item to the paragraph.
      row = append_lines(buf, { '', text }) + 1
    end
    r.mode = 'block'
    key = api.nvim_buf_set_extmark(buf, ns, row, 0, {})
  end)
  return key
end

--- Rewrite a line made by `M.line` (a tool call whose status changed).
function M.set_line(key, text)
  write(function(buf)
    local pos = api.nvim_buf_get_extmark_by_id(buf, ns, key, {})
    if pos[1] then
      api.nvim_buf_set_lines(buf, pos[1], pos[1] + 1, false, { text })
      -- set_lines over the mark's row can move it: pin it back to the row.
      api.nvim_buf_set_extmark(buf, ns, pos[1], 0, { id = key })
    end
  end)
end

--- Append a section of several lines (the plan) as a paragraph of its own.
--- Returns a key for `set_block`.
function M.block(r, lines)
  local key = { n = #lines }
  write(function(buf)
    local n, last = last_line(buf)
    local row
    if last == '' then
      row = n - 1
      api.nvim_buf_set_lines(buf, row, row + 1, false, lines)
    else
      row = append_lines(buf, vim.list_extend({ '' }, lines)) + 1
    end
    -- An empty line after it: what streams next starts a paragraph of its own.
    append_lines(buf, { '' })
    r.mode = 'section'
    key.id = api.nvim_buf_set_extmark(buf, ns, row, 0, {})
  end)
  return key
end

--- Replace the lines of a section made by `M.block`.
function M.set_block(key, lines)
  write(function(buf)
    local pos = api.nvim_buf_get_extmark_by_id(buf, ns, key.id, {})
    if pos[1] then
      api.nvim_buf_set_lines(buf, pos[1], pos[1] + key.n, false, lines)
      key.n = #lines
      api.nvim_buf_set_extmark(buf, ns, pos[1], 0, { id = key.id })
    end
  end)
end

local PLAN_BOX = { completed = '[x]', in_progress = '[-]', pending = '[ ]' }

--- The lines of a plan section: a task list, the entry in progress in bold.
---@param entries {content: string, priority: string?, status: string?}[]
function M.plan_lines(entries)
  local lines = { '**Plan**' }
  if #entries == 0 then
    lines[1] = '**Plan**: cleared'
    return lines
  end
  lines[2] = ''
  for _, e in ipairs(entries) do
    local text = tostring(e.content or ''):gsub('\n', ' ')
    if e.status == 'in_progress' then
      text = '**' .. text .. '** (in progress)'
    end
    if e.priority == 'high' or e.priority == 'low' then
      text = text .. ' · ' .. e.priority
    end
    lines[#lines + 1] = ('- %s %s'):format(PLAN_BOX[e.status] or '[ ]', text)
  end
  return lines
end

--- Close a turn with an italic footer line (stop reason, usage, cancelled).
function M.finish(r, text)
  if r.finished then
    return
  end
  r.finished = true
  M.note(text)
  r.mode = nil
end

--- A standalone italic note (a turn's footer, an error outside a turn).
function M.note(text)
  write(function(buf)
    trim(buf)
    append_lines(buf, { '', '_' .. text .. '_' })
  end)
end

--- The whole log as one string (tests, and :AgentdAsk callers that want it).
function M.content()
  return table.concat(api.nvim_buf_get_lines(M.buf(), 0, -1, false), '\n')
end

return M
