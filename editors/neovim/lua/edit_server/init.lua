-- edit-server for Neovim 0.12+: inline completion (FIM) through the built-in LSP client and next-edit
-- suggestions (textDocument/copilotInlineEdit) rendered by ./next_edit.lua.
--
--   require('edit_server').setup({ init_options = { model = 'default' } })
--
-- A thin client: context building, filtering and the show/hide gate live in the server.

local M = {}

---@class edit_server.Config
M.defaults = {
  name = 'edit_server', -- LSP client name
  cmd = { 'edit-server' }, -- stdio language server command
  filetypes = nil, -- nil = every buffer with a file
  root_markers = { '.git' },
  -- sent as initializationOptions (camelCase, as the server reads them)
  init_options = {
    model = 'default', -- "default" | "tiny-random" | path to an HF dir or .gguf
    device = 'auto', -- "auto" | "cpu" | "cuda" | "mps"
    gate = { enabled = true }, -- gate.threshold = <0..1> to override the server's default
    -- every server setting works here (README "Settings"): contextBudget, maxTokens, exclude, threads, …
  },
  inline_completion = {
    enabled = true, -- vim.lsp.inline_completion (ghost text while typing)
    -- ms the cursor stays on a new line before the server prefills the prompt there (0: never tell it)
    rest_ms = 150,
    keymaps = {
      accept = '<Tab>', -- insert mode; falls back to a literal <Tab> when nothing is shown
      next = '<M-]>',
      prev = '<M-[>',
    },
  },
  next_edit = {
    enabled = true,
    auto = true, -- request after edits in normal mode and on InsertLeave
    debounce_ms = 300,
    -- after accepting, ask again at once at the new cursor: a change needed in several places (a rename's
    -- other uses) comes as a chain of one-place suggestions
    chain = true,
    keymaps = {
      accept = '<M-CR>', -- normal + insert mode; on a jump marker ("⇥ next edit: L120") it goes there first
      dismiss = '<M-BS>',
    },
    hl = { insert = 'EditServerInsert', delete = 'EditServerDelete', hint = 'EditServerHint', jump = 'EditServerJump' },
  },
  notify_errors = true, -- vim.notify on `$/editServer/status` state "error"
}

---@type edit_server.Config
M.config = vim.deepcopy(M.defaults)
-- last `$/editServer/status`; `hidden`: why the last suggestion was not shown ('' = it was shown)
M.status = { state = 'stopped', message = '', hidden = '' }
M.did_setup = false

local function set_highlights()
  vim.api.nvim_set_hl(0, 'EditServerInsert', { default = true, link = 'DiffAdd' })
  vim.api.nvim_set_hl(0, 'EditServerDelete', { default = true, link = 'DiffDelete' })
  vim.api.nvim_set_hl(0, 'EditServerHint', { default = true, link = 'Comment' })
  vim.api.nvim_set_hl(0, 'EditServerJump', { default = true, link = 'DiagnosticHint' })
end

local function on_status(_, params)
  local hidden = params.hidden -- only in the server's "why nothing shows" updates; keep it otherwise
  M.status = {
    state = params.state or M.status.state,
    message = params.message or '',
    hidden = type(hidden) == 'string' and hidden or M.status.hidden,
  }
  if M.status.state == 'error' and M.config.notify_errors then
    vim.notify('edit-server: ' .. M.status.message, vim.log.levels.WARN)
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'EditServerStatus', modeline = false })
end

--- The running client for `bufnr` (current buffer when nil), or nil.
---@return vim.lsp.Client?
function M.client(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr or 0, name = M.config.name })[1]
end

--- A short status string for statuslines: the state when not ready, else why the last suggestion was
--- hidden (e.g. "hidden by the gate: score 0.08 < 0.50"), else ''.
function M.statusline()
  local s = M.status
  if s.state ~= 'ready' and s.state ~= 'stopped' then
    return 'edit-server: ' .. s.state
  end
  if s.state == 'ready' and s.hidden ~= '' then
    return 'edit-server: ' .. s.hidden
  end
  return ''
end

--- Accept an inline completion item (`vim.lsp.inline_completion.get({ on_accept = ... })`): the server
--- hears the accept first, so the buffer change that follows is not logged as typed over; then the
--- item's insert text replaces its range (LSP), and the cursor goes to the end of the suggestion, before
--- the rest of the line that the item carries.
---@param item vim.lsp.inline_completion.Item
function M.accept_inline(item)
  local api = vim.api
  local bufnr = api.nvim_get_current_buf()
  local client = vim.lsp.get_client_by_id(item.client_id)
  if item.command and client then
    client:exec_cmd(item.command, { bufnr = bufnr })
  end
  local text = item.insert_text
  if type(text) ~= 'string' then
    vim.snippet.expand(text.value)
    return
  end
  local r = item.range
  if not r then
    api.nvim_paste(text, false, 0)
    return
  end
  local old = table.concat(api.nvim_buf_get_text(bufnr, r.start.row, r.start.col, r.end_.row, r.end_.col, {}), '\n')
  api.nvim_buf_set_text(bufnr, r.start.row, r.start.col, r.end_.row, r.end_.col, vim.split(text, '\n', { plain = true }))
  local keep = 0 -- the text that was already there after the suggestion
  while keep < #old and keep < #text and old:byte(#old - keep) == text:byte(#text - keep) do
    keep = keep + 1
  end
  while keep > 0 and (text:byte(#text - keep + 1) or 0) >= 0x80 and (text:byte(#text - keep + 1) or 0) < 0xC0 do
    keep = keep - 1 -- never inside a UTF-8 character
  end
  local lines = vim.split(text:sub(1, #text - keep), '\n', { plain = true })
  local col = (#lines == 1 and r.start.col or 0) + #lines[#lines]
  pcall(api.nvim_win_set_cursor, 0, { r.start.row + #lines, col })
end

local function map(modes, lhs, rhs, desc, opts)
  if lhs and lhs ~= '' then
    vim.keymap.set(modes, lhs, rhs, vim.tbl_extend('force', { desc = desc }, opts or {}))
  end
end

local function inline_keymaps(keys)
  map('i', keys.accept, function()
    if not vim.lsp.inline_completion.get({ on_accept = M.accept_inline }) then
      return keys.accept
    end
  end, 'edit-server: accept inline completion', { expr = true, replace_keycodes = true })
  map('i', keys.next, function()
    vim.lsp.inline_completion.select({ count = 1 })
  end, 'edit-server: next inline completion')
  map('i', keys.prev, function()
    vim.lsp.inline_completion.select({ count = -1 })
  end, 'edit-server: previous inline completion')
end

---@param opts? edit_server.Config
function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  M.did_setup = true
  local cfg = M.config
  if type(cfg.cmd) == 'table' and vim.fn.executable(cfg.cmd[1]) ~= 1 then
    vim.notify(
      ('edit-server: %q is not executable (not on PATH?): no suggestions. Install the server or set '
        .. '`cmd`; see :checkhealth edit_server'):format(tostring(cfg.cmd[1])),
      vim.log.levels.WARN
    )
  end
  set_highlights()
  vim.lsp.config(cfg.name, {
    cmd = cfg.cmd,
    filetypes = cfg.filetypes,
    root_markers = cfg.root_markers,
    init_options = cfg.init_options,
    handlers = { ['$/editServer/status'] = on_status },
  })
  vim.lsp.enable(cfg.name)
  if cfg.inline_completion.enabled then
    vim.lsp.inline_completion.enable(true)
    inline_keymaps(cfg.inline_completion.keymaps)
    if (cfg.inline_completion.rest_ms or 0) > 0 then
      require('edit_server.rest').setup(cfg.inline_completion.rest_ms, M.client)
    end
  end
  if cfg.next_edit.enabled then
    require('edit_server.next_edit').setup(cfg.next_edit, M.client)
  end
  local group = vim.api.nvim_create_augroup('edit_server.colors', { clear = true })
  vim.api.nvim_create_autocmd('ColorScheme', { group = group, callback = set_highlights })
end

return M
