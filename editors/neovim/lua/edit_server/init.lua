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
    device = 'auto', -- "auto" | "cpu" | "cuda"
    gate = { enabled = true }, -- gate.threshold = <0..1> to override the server's default
    -- contextBudget = 2048, debounceMs = 150,
  },
  inline_completion = {
    enabled = true, -- vim.lsp.inline_completion (ghost text while typing)
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
    keymaps = {
      accept = '<M-CR>', -- normal + insert mode
      dismiss = '<M-BS>',
    },
    hl = { insert = 'EditServerInsert', delete = 'EditServerDelete', hint = 'EditServerHint' },
  },
  notify_errors = true, -- vim.notify on `$/editServer/status` state "error"
}

---@type edit_server.Config
M.config = vim.deepcopy(M.defaults)
M.status = { state = 'stopped', message = '' } -- last `$/editServer/status`

local function set_highlights()
  vim.api.nvim_set_hl(0, 'EditServerInsert', { default = true, link = 'DiffAdd' })
  vim.api.nvim_set_hl(0, 'EditServerDelete', { default = true, link = 'DiffDelete' })
  vim.api.nvim_set_hl(0, 'EditServerHint', { default = true, link = 'Comment' })
end

local function on_status(_, params)
  M.status = { state = params.state or '?', message = params.message or '' }
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

--- A short status string for statuslines.
function M.statusline()
  if M.status.state == 'ready' or M.status.state == 'stopped' then
    return ''
  end
  return 'edit-server: ' .. M.status.state
end

local function map(modes, lhs, rhs, desc, opts)
  if lhs and lhs ~= '' then
    vim.keymap.set(modes, lhs, rhs, vim.tbl_extend('force', { desc = desc }, opts or {}))
  end
end

local function inline_keymaps(keys)
  map('i', keys.accept, function()
    if not vim.lsp.inline_completion.get() then
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
  local cfg = M.config
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
  end
  if cfg.next_edit.enabled then
    require('edit_server.next_edit').setup(cfg.next_edit, M.client)
  end
  local group = vim.api.nvim_create_augroup('edit_server.colors', { clear = true })
  vim.api.nvim_create_autocmd('ColorScheme', { group = group, callback = set_highlights })
end

return M
