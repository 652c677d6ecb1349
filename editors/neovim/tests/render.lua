-- Headless check of next-edit rendering: draws each case's edit and reports the extmarks.
--   ES_PLUGIN=editors/neovim ES_CASES=cases.json ES_OUT=out.json nvim --headless --clean -S render.lua
-- cases: [{lines: [...], edit: {text, range}, encoding: "utf-16"}]
vim.opt.rtp:prepend(vim.env.ES_PLUGIN)
local ne = require('edit_server.next_edit')
local cases = vim.json.decode(table.concat(vim.fn.readfile(vim.env.ES_CASES), '\n'))
local results = { cases = {} }
local ok, err = pcall(function()
  for i, case in ipairs(cases) do
    local buf = vim.api.nvim_create_buf(true, false)
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, case.lines)
    local changed = ne._render(buf, case.edit, case.encoding or 'utf-16')
    local marks = {}
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ne._ns, 0, -1, { details = true })) do
      local d = m[4]
      local virt = d.virt_text and table.concat(vim.tbl_map(function(c) return c[1] end, d.virt_text), '')
      local vlines = d.virt_lines and vim.tbl_map(function(l) return l[1][1] end, d.virt_lines)
      marks[#marks + 1] = {
        row = m[2], col = m[3], end_row = d.end_row, end_col = d.end_col, hl = d.hl_group,
        line_hl = d.line_hl_group, above = d.virt_lines_above,
        virt_text = virt, virt_pos = d.virt_text_pos, virt_lines = vlines,
      }
    end
    results.cases[i] = { changed = changed, marks = marks }
  end
end)
-- keymaps: with nothing shown, <Tab> and <M-CR> keep their usual meaning (a literal Tab / newline)
if ok then
  ok, err = pcall(function()
    require('edit_server').setup({ cmd = { 'edit-server-not-installed' } })
    local buf = vim.api.nvim_create_buf(true, false)
    vim.api.nvim_set_current_buf(buf)
    vim.bo[buf].expandtab = false
    vim.api.nvim_feedkeys(vim.keycode('ix<Tab>y<Esc>'), 'mx', false)
    results.fallback_line = vim.api.nvim_buf_get_lines(buf, 0, -1, false)[1]
    -- :checkhealth edit_server says why nothing will show (the server command is not installed)
    vim.cmd('checkhealth edit_server')
    results.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  end)
end
if not ok then
  results = { error = tostring(err) }
end
vim.fn.writefile({ vim.json.encode(results) }, vim.env.ES_OUT)
vim.cmd('qall!')
