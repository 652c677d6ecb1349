-- Next-edit suggestions: request `textDocument/copilotInlineEdit`, render the first edit with extmarks
-- (inserted text as virtual text, deleted text highlighted), accept (run the server's command, apply)
-- or dismiss. One suggestion per buffer; any change to the buffer drops it.
-- An edit far from the cursor or in another document (a jump: the server's `jump: true`, another
-- `textDocument.uri`, or a range starting more than JUMP_BELOW lines below / JUMP_ABOVE above the
-- cursor) shows as a marker at the end of the cursor's line; the accept key first goes there (switching
-- buffers if needed) and draws the edit in place, the next press accepts it. After an accept the plugin
-- asks again at the new cursor (`chain`), so a change needed in several places comes one place at a time.

local api = vim.api
local M = {}

local ns = api.nvim_create_namespace('edit_server.next_edit')
local METHOD = 'textDocument/copilotInlineEdit'

---@class edit_server.Suggestion
---@field edit table the LSP edit {text, range, textDocument, command?}
---@field client_id integer
---@field version integer buffer version it was computed for
---@field jump? {bufnr: integer?, version: integer?, label: string} a jump target not drawn yet: the
---  target's buffer (nil = not loaded) and its version when the reply came

---@type table<integer, edit_server.Suggestion>
M.shown = {}
M.last_response = nil -- {bufnr, err, result} of the latest reply (for statuslines and tests)

local opts = { ---@type table (replaced by setup)
  hl = { insert = 'EditServerInsert', delete = 'EditServerDelete', hint = 'EditServerHint', jump = 'EditServerJump' },
  keymaps = {},
  debounce_ms = 300,
  chain = true,
}
local get_client ---@type fun(bufnr: integer?): vim.lsp.Client?
local timers = {} ---@type table<integer, uv.uv_timer_t>
local chained = {} ---@type table<integer, integer> buffer version left by an accept that asked again

-- an edit starting further than this from the cursor's line is a jump target, not drawn in place
local JUMP_BELOW, JUMP_ABOVE = 8, 6

local function buf_version(bufnr)
  return vim.lsp.util.buf_versions[bufnr] or 0
end

-- LSP position → 0-based (row, byte col), using the client's position encoding
local function to_byte_pos(bufnr, pos, encoding)
  local line = api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1]
  if not line then
    local n = api.nvim_buf_line_count(bufnr)
    return n - 1, #(api.nvim_buf_get_lines(bufnr, n - 1, n, false)[1] or '')
  end
  local ok, col = pcall(vim.str_byteindex, line, encoding, pos.character, false)
  return pos.line, ok and col or #line
end

-- (row, col) after walking `text` from (row, col)
local function advance(row, col, text)
  local lines = vim.split(text, '\n', { plain = true })
  if #lines == 1 then
    return row, col + #text
  end
  return row + #lines - 1, #lines[#lines]
end

-- length of the common prefix / suffix of a and b in bytes, kept on UTF-8 boundaries
local function common_affixes(a, b)
  local p, la, lb = 0, #a, #b
  while p < la and p < lb and a:byte(p + 1) == b:byte(p + 1) do
    p = p + 1
  end
  while p > 0 and (a:byte(p + 1) or 0) >= 0x80 and (a:byte(p + 1) or 0) < 0xC0 do
    p = p - 1
  end
  local s = 0
  while s < la - p and s < lb - p and a:byte(la - s) == b:byte(lb - s) do
    s = s + 1
  end
  while s > 0 and (a:byte(la - s + 1) or 0) >= 0x80 and (a:byte(la - s + 1) or 0) < 0xC0 do
    s = s - 1
  end
  return p, s
end

function M.dismiss(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
  end
  M.shown[bufnr] = nil
end

--- The buffer of `uri` when one exists (nil otherwise: nothing is created).
local function uri_buf(uri)
  for _, b in ipairs(api.nvim_list_bufs()) do
    if vim.uri_from_bufnr(b) == uri then
      return b
    end
  end
end

--- Whether `edit`, answered for the cursor at 0-based `row` of `bufnr`, is a jump: flagged by the
--- server, in another document, or starting more than JUMP_BELOW lines below / JUMP_ABOVE above.
---@return boolean
function M.is_jump(bufnr, edit, row)
  if edit.jump == true then
    return true
  end
  local uri = edit.textDocument and edit.textDocument.uri
  if uri and uri ~= vim.uri_from_bufnr(bufnr) then
    return true
  end
  local line = edit.range.start.line
  return line > row + JUMP_BELOW or line < row - JUMP_ABOVE
end

-- "L120" (same document) or "other.py:12" (1-based line)
local function jump_label(bufnr, edit)
  local uri = edit.textDocument and edit.textDocument.uri
  local line = edit.range.start.line + 1
  if not uri or uri == vim.uri_from_bufnr(bufnr) then
    return 'L' .. line
  end
  local ok, fname = pcall(vim.uri_to_fname, uri)
  return (ok and vim.fs.basename(fname) or uri) .. ':' .. line
end

-- Draw the change of one line region: `old` at (row, col) becomes `new` (no newlines in either
-- after trimming is required: inserted newlines go to virt_lines). Only the differing middle is drawn.
local function render_span(bufnr, row, col, old, new)
  local hl = opts.hl
  local p, s = common_affixes(old, new)
  local del, ins = old:sub(p + 1, #old - s), new:sub(p + 1, #new - s)
  local drow, dcol = advance(row, col, old:sub(1, p)) -- where the change starts
  local arow, acol = advance(drow, dcol, del) -- where the deleted text ends
  if del ~= '' then
    api.nvim_buf_set_extmark(bufnr, ns, drow, dcol, { end_row = arow, end_col = acol, hl_group = hl.delete })
  end
  if ins ~= '' then
    local lines = vim.split(ins, '\n', { plain = true })
    local virt_lines = {}
    for i = 2, #lines do
      virt_lines[#virt_lines + 1] = { { lines[i], hl.insert } }
    end
    api.nvim_buf_set_extmark(bufnr, ns, arow, acol, {
      virt_text = lines[1] ~= '' and { { lines[1], hl.insert } } or nil,
      virt_text_pos = 'inline',
      virt_lines = #virt_lines > 0 and virt_lines or nil,
    })
  end
  return drow
end

-- Whole lines `old_lines` starting at buffer row `row` become `new_lines`: per line-diff hunk,
-- lines changed one-for-one are drawn in place, other hunks as deleted lines + virtual lines below.
local function render_lines(bufnr, row, old_lines, new_lines)
  local diff = (vim.text and vim.text.diff) or vim.diff
  local a, b = table.concat(old_lines, '\n') .. '\n', table.concat(new_lines, '\n') .. '\n'
  local hunks = diff(a, b, { result_type = 'indices', linematch = 60 }) --[[@as integer[][] ]]
  local first
  for _, h in ipairs(hunks) do
    local sa, ca, sb, cb = h[1], h[2], h[3], h[4]
    if ca == cb then
      for k = 0, ca - 1 do
        local r = render_span(bufnr, row + sa - 1 + k, 0, old_lines[sa + k], new_lines[sb + k])
        first = first or r
      end
    else
      local virt = {}
      for k = 0, cb - 1 do
        virt[#virt + 1] = { { new_lines[sb + k], opts.hl.insert } }
      end
      if ca > 0 then
        local r0 = row + sa - 1
        for k = 0, ca - 1 do
          api.nvim_buf_set_extmark(bufnr, ns, r0 + k, 0, { line_hl_group = opts.hl.delete })
        end
        if #virt > 0 then -- the new lines go below the last deleted one
          api.nvim_buf_set_extmark(bufnr, ns, r0 + ca - 1, 0, { virt_lines = virt })
        end
        first = first or r0
      else -- pure insertion after old line `sa` (0 = before the first line)
        local r0 = sa == 0 and row or row + sa - 1
        api.nvim_buf_set_extmark(bufnr, ns, r0, 0, { virt_lines = virt, virt_lines_above = sa == 0 })
        first = first or r0
      end
    end
  end
  return first or row
end

-- Draw `edit` in `bufnr`; returns false when the edit changes nothing.
local function render(bufnr, edit, encoding)
  local srow, scol = to_byte_pos(bufnr, edit.range.start, encoding)
  local erow, ecol = to_byte_pos(bufnr, edit.range['end'], encoding)
  local old = table.concat(api.nvim_buf_get_text(bufnr, srow, scol, erow, ecol, {}), '\n')
  local new = edit.text or ''
  if old == new then
    return false
  end
  local top
  if not old:find('\n', 1, true) and not new:find('\n', 1, true) then
    top = render_span(bufnr, srow, scol, old, new)
  else -- widen to whole lines and diff line by line
    local head = api.nvim_buf_get_text(bufnr, srow, 0, srow, scol, {})[1]
    local tail = api.nvim_buf_get_lines(bufnr, erow, erow + 1, false)[1] or ''
    tail = tail:sub(ecol + 1)
    local old_lines = api.nvim_buf_get_lines(bufnr, srow, erow + 1, false)
    local new_lines = vim.split(head .. new .. tail, '\n', { plain = true })
    top = render_lines(bufnr, srow, old_lines, new_lines)
  end
  local hint = opts.keymaps.accept and ('  ' .. opts.keymaps.accept .. ' accept edit') or '  next edit'
  api.nvim_buf_set_extmark(bufnr, ns, top, 0, { virt_text = { { hint, opts.hl.hint } }, virt_text_pos = 'eol' })
  return true
end

M._render = render -- for tests
M._ns = ns

-- Show `edit` as a jump target: a marker at the end of the cursor's line `row`. False when the edit
-- changes nothing (checked where the target's text is at hand).
local function render_jump(bufnr, row, edit, encoding)
  local target = bufnr
  local uri = edit.textDocument and edit.textDocument.uri
  if uri and uri ~= vim.uri_from_bufnr(bufnr) then
    target = uri_buf(uri)
  end
  local info = { label = jump_label(bufnr, edit) }
  if target and api.nvim_buf_is_loaded(target) then
    local srow, scol = to_byte_pos(target, edit.range.start, encoding)
    local erow, ecol = to_byte_pos(target, edit.range['end'], encoding)
    local old = table.concat(api.nvim_buf_get_text(target, srow, scol, erow, ecol, {}), '\n')
    if old == (edit.text or '') then
      return nil
    end
    info.bufnr, info.version = target, buf_version(target)
  end
  row = math.min(row, api.nvim_buf_line_count(bufnr) - 1)
  api.nvim_buf_set_extmark(bufnr, ns, row, 0, {
    virt_text = { { '  ⇥ next edit: ' .. info.label, opts.hl.jump or 'EditServerJump' } },
    virt_text_pos = 'eol',
  })
  return info
end

--- Ask the server for a next edit at the cursor of the current window.
---@param cb? fun(shown: boolean)
function M.request(bufnr, cb)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  local client = get_client(bufnr)
  if not client then
    return cb and cb(false)
  end
  local win = vim.fn.bufwinid(bufnr)
  if win == -1 then
    return cb and cb(false)
  end
  local version = buf_version(bufnr)
  local params = vim.lsp.util.make_position_params(win, client.offset_encoding)
  params.textDocument.version = version
  local row = params.position.line
  client:request(METHOD, params, function(err, result)
    M.last_response = { bufnr = bufnr, err = err, result = result }
    local shown = false
    if err then
      vim.notify_once('edit-server: ' .. METHOD .. ' failed: ' .. (err.message or ''), vim.log.levels.DEBUG)
    elseif api.nvim_buf_is_valid(bufnr) and buf_version(bufnr) == version then
      local edit = result and result.edits and result.edits[1]
      M.dismiss(bufnr)
      if edit and M.is_jump(bufnr, edit, row) then
        local jump = render_jump(bufnr, row, edit, client.offset_encoding)
        if jump then
          M.shown[bufnr] = { edit = edit, client_id = client.id, version = version, jump = jump }
          shown = true
        end
      elseif edit and render(bufnr, edit, client.offset_encoding) then
        M.shown[bufnr] = { edit = edit, client_id = client.id, version = version }
        shown = true
      end
      if shown then
        client:notify('textDocument/didShowInlineEdit', { item = edit })
      end
    end
    if cb then
      cb(shown)
    end
  end, bufnr)
end

--- Go to the shown jump target of `bufnr`: the cursor moves to the start of the edit (in the target's
--- buffer, shown in the current window unless a window already shows it), where the edit is drawn in
--- place; accepting it is the next step. False (and the marker dropped) when the target changed since.
---@return boolean jumped
function M.jump(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  local sug = M.shown[bufnr]
  local client = sug and vim.lsp.get_client_by_id(sug.client_id)
  M.dismiss(bufnr)
  if not sug or not sug.jump or not client or buf_version(bufnr) ~= sug.version then
    return false
  end
  local edit, jump = sug.edit, sug.jump
  local target = bufnr
  local uri = edit.textDocument and edit.textDocument.uri
  if uri and uri ~= vim.uri_from_bufnr(bufnr) then
    target = jump.bufnr or vim.uri_to_bufnr(uri)
    if jump.bufnr and buf_version(target) ~= jump.version then
      return false -- changed since the server saw it
    end
  end
  if target ~= api.nvim_get_current_buf() then
    local win = vim.fn.bufwinid(target)
    local ok = pcall(function()
      if win ~= -1 then
        api.nvim_set_current_win(win)
      else
        api.nvim_win_set_buf(0, target)
      end
    end)
    if not ok or not api.nvim_buf_is_loaded(target) then
      return false
    end
  end
  local srow, scol = to_byte_pos(target, edit.range.start, client.offset_encoding)
  pcall(api.nvim_win_set_cursor, 0, { srow + 1, scol })
  M.dismiss(target)
  if not render(target, edit, client.offset_encoding) then
    return false
  end
  M.shown[target] = { edit = edit, client_id = client.id, version = buf_version(target) }
  return true
end

--- Run the shown edit's command, then apply the edit. The accept goes out first: the server reads
--- messages in order, so it records "accepted" before the buffer change it would otherwise log as
--- the suggestion being typed over (rejected). A jump target is gone to first (`M.jump`) instead;
--- after an accept the next edit is asked for at the new cursor (`chain`).
---@return boolean accepted
function M.accept(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  local sug = M.shown[bufnr]
  if sug and sug.jump then
    M.jump(bufnr)
    return false
  end
  local client = sug and vim.lsp.get_client_by_id(sug.client_id)
  if not sug or not client or buf_version(bufnr) ~= sug.version then
    M.dismiss(bufnr)
    return false
  end
  M.dismiss(bufnr)
  local edit = sug.edit
  if edit.command then
    client:exec_cmd(edit.command, { bufnr = bufnr })
  end
  vim.lsp.util.apply_text_edits({ { range = edit.range, newText = edit.text } }, bufnr, client.offset_encoding)
  local srow, scol = to_byte_pos(bufnr, edit.range.start, client.offset_encoding)
  local row, col = advance(srow, scol, edit.text)
  local win = vim.fn.bufwinid(bufnr)
  if win ~= -1 then
    pcall(api.nvim_win_set_cursor, win, { row + 1, col })
  end
  if opts.chain ~= false then
    chained[bufnr] = buf_version(bufnr) -- the change just made asks no second (debounced) time
    M.request(bufnr)
  end
  return true
end

local function schedule_request(bufnr)
  local t = timers[bufnr]
  if not t then
    t = assert(vim.uv.new_timer())
    timers[bufnr] = t
  end
  t:stop()
  t:start(opts.debounce_ms, 0, vim.schedule_wrap(function()
    if api.nvim_buf_is_valid(bufnr) and api.nvim_get_current_buf() == bufnr and vim.fn.mode() == 'n' then
      M.request(bufnr)
    end
  end))
end

local function map(modes, lhs, rhs, desc, expr)
  if lhs and lhs ~= '' then
    vim.keymap.set(modes, lhs, rhs, { desc = desc, expr = expr or false })
  end
end

---@param cfg table the `next_edit` section of the plugin config
---@param client_fn fun(bufnr: integer?): vim.lsp.Client?
function M.setup(cfg, client_fn)
  opts, get_client = cfg, client_fn
  local group = api.nvim_create_augroup('edit_server.next_edit', { clear = true })
  api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI', 'InsertEnter', 'BufLeave' }, {
    group = group,
    callback = function(ev)
      local sug = M.shown[ev.buf]
      -- a suggestion made for the text as it is now stays (TextChanged can come after the reply of
      -- the request an accept sends at once)
      if sug and not (ev.event:match('^TextChanged') and sug.version == buf_version(ev.buf)) then
        M.dismiss(ev.buf)
      end
    end,
  })
  if cfg.auto then
    api.nvim_create_autocmd({ 'TextChanged', 'InsertLeave' }, {
      group = group,
      callback = function(ev)
        if ev.event == 'TextChanged' and chained[ev.buf] == buf_version(ev.buf) then
          return -- the accept that made this change has asked already
        end
        if get_client(ev.buf) then
          schedule_request(ev.buf)
        end
      end,
    })
  end
  api.nvim_create_autocmd('BufUnload', {
    group = group,
    callback = function(ev)
      local t = timers[ev.buf]
      if t then
        t:stop()
        t:close()
        timers[ev.buf] = nil
      end
      M.shown[ev.buf] = nil
      chained[ev.buf] = nil
    end,
  })
  -- accept/dismiss keys only act when an edit is shown, else they do what they did before
  local keys = cfg.keymaps
  map({ 'n', 'i' }, keys.accept, function()
    if M.shown[api.nvim_get_current_buf()] then
      vim.schedule(function()
        M.accept(0)
      end)
      return ''
    end
    return keys.accept
  end, 'edit-server: accept next edit', true)
  map({ 'n', 'i' }, keys.dismiss, function()
    if M.shown[api.nvim_get_current_buf()] then
      M.dismiss(0)
      return ''
    end
    return keys.dismiss
  end, 'edit-server: dismiss next edit', true)
end

return M
