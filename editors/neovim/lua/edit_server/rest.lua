-- Where the cursor rests: `$/editServer/cursorRest` a moment after the cursor moves to another line (or
-- buffer), so the server prefills the completion prompt there while the user reads, and the first
-- suggestion after a jump is computed from a cached prompt. Typing moves the cursor too: a move inside the
-- same line, or one made by a change of the text, sends nothing (the completion request follows anyway).
local api = vim.api

local M = {}

local METHOD = '$/editServer/cursorRest'
local timer = nil ---@type uv.uv_timer_t?
local last = {} ---@type table<integer, { row: integer, tick: integer }>

---@param delay_ms integer
---@param get_client fun(bufnr: integer?): vim.lsp.Client?
local function schedule(delay_ms, get_client)
  local bufnr = api.nvim_get_current_buf()
  local row = api.nvim_win_get_cursor(0)[1]
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local prev = last[bufnr]
  if prev and (prev.row == row or prev.tick ~= tick) then
    last[bufnr] = { row = row, tick = tick }
    return -- the same line, or the text changed: typing, not a jump
  end
  last[bufnr] = { row = row, tick = tick }
  if timer then
    timer:stop()
  else
    timer = assert(vim.uv.new_timer())
  end
  timer:start(delay_ms, 0, vim.schedule_wrap(function()
    if not api.nvim_buf_is_valid(bufnr) or api.nvim_get_current_buf() ~= bufnr then
      return
    end
    if api.nvim_win_get_cursor(0)[1] ~= row then
      return -- it moved on: that move has its own timer
    end
    local client = get_client(bufnr)
    if client then
      client:notify(METHOD, vim.lsp.util.make_position_params(0, client.offset_encoding))
    end
  end))
end

---@param delay_ms integer ms the cursor stays on a new line before the server is told
---@param get_client fun(bufnr: integer?): vim.lsp.Client?
function M.setup(delay_ms, get_client)
  local group = api.nvim_create_augroup('edit_server.rest', { clear = true })
  api.nvim_create_autocmd({ 'CursorMoved', 'CursorMovedI', 'BufEnter' }, {
    group = group,
    callback = function(ev)
      if ev.event == 'BufEnter' then
        last[ev.buf] = nil -- a buffer entered: its cursor counts as a jump
      end
      if get_client(ev.buf) then
        schedule(delay_ms, get_client)
      end
    end,
  })
  api.nvim_create_autocmd('BufUnload', {
    group = group,
    callback = function(ev)
      last[ev.buf] = nil
    end,
  })
end

return M
