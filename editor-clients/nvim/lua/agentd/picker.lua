-- vim.ui.select and vim.ui.input for questions the plugin may have to take
-- back: a tool's approval, a permission request or an MCP server's question
-- that the prompt's cancel or the daemon withdraws before the user answers
-- must not stay on screen.
local api = vim.api

local M = {}

--- Call open(), returning a function that closes the windows it opened
--- while it was called (a floating picker such as telescope's, fzf-lua's or
--- snacks' opens them then): vim.ui.select and vim.ui.input have no way to
--- close what they show. A picker that blocks (the built-in inputlist) or
--- opens its windows later is left alone; the caller ignores its late answer.
local function closable(open)
  local before = {}
  for _, win in ipairs(api.nvim_list_wins()) do
    before[win] = true
  end
  open()
  local opened = vim.tbl_filter(function(win)
    return not before[win]
  end, api.nvim_list_wins())
  return function()
    local current = api.nvim_get_current_win()
    for _, win in ipairs(opened) do
      if api.nvim_win_is_valid(win) then
        if win == current then
          vim.cmd.stopinsert() -- a picker's prompt would leave insert mode behind
        end
        pcall(api.nvim_win_close, win, true)
      end
    end
  end
end

--- vim.ui.select, returning a function that closes its picker (see closable).
function M.select_closable(items, opts, on_choice)
  return closable(function()
    vim.ui.select(items, opts, on_choice)
  end)
end

--- vim.ui.input, returning a function that closes its prompt window (see closable).
function M.input_closable(opts, on_confirm)
  return closable(function()
    vim.ui.input(opts, on_confirm)
  end)
end

return M
