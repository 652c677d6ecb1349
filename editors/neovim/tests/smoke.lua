-- Headless smoke test of the plugin against a running language server.
--   nvim --headless --clean -S editors/neovim/tests/smoke.lua
-- env: ES_PLUGIN (plugin dir), ES_CMD (JSON list: server command), ES_FILE (file to open),
--      ES_OUT (where to write the JSON report), ES_LINE / ES_COL (1-based cursor for the requests),
--      ES_TIMEOUT_MS (per wait, default 60000), ES_FEEDBACK_DB (server feedbackDb), ES_GATE=1 (gate on).
-- The Python test asserts on the report.
local api = vim.api
local env = vim.env
local out = { steps = {} }
local timeout = tonumber(env.ES_TIMEOUT_MS or '60000')

local function finish()
  local f = assert(io.open(env.ES_OUT, 'w'))
  f:write(vim.json.encode(out))
  f:close()
  vim.cmd('qall!')
end

local function sleep(ms)
  local co = coroutine.running()
  vim.defer_fn(function()
    coroutine.resume(co)
  end, ms)
  coroutine.yield()
end

local function wait_for(cond, ms)
  local waited = 0
  while not cond() and waited < (ms or timeout) do
    sleep(50)
    waited = waited + 50
  end
  return cond() and true or false
end

local function extmarks(ns_name)
  local ns = api.nvim_get_namespaces()[ns_name]
  if not ns then
    return {}
  end
  return api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })
end

-- the screen row showing buffer line `lnum` (1-based) of the current window, trailing blanks cut
local function screen_line(lnum)
  vim.cmd('redraw')
  local row = vim.fn.screenpos(0, lnum, 1).row
  local cells = {}
  for c = 1, vim.o.columns do
    cells[#cells + 1] = vim.fn.screenstring(row, c)
  end
  return (table.concat(cells):gsub('%s+$', ''))
end

local function main()
  vim.opt.rtp:prepend(env.ES_PLUGIN)
  vim.cmd.runtime('plugin/edit_server.lua')
  local es = require('edit_server')
  local ne = require('edit_server.next_edit')
  es.setup({
    cmd = vim.json.decode(env.ES_CMD),
    init_options = {
      model = 'tiny-random',
      device = 'cpu',
      gate = { enabled = env.ES_GATE == '1' },
      debounceMs = 0,
      feedbackDb = env.ES_FEEDBACK_DB or ':memory:',
    },
    next_edit = { auto = false },
  })
  local requests = {}
  api.nvim_create_autocmd('LspRequest', {
    callback = function(ev)
      local r = ev.data.request
      if r.type == 'complete' then
        requests[r.method] = (requests[r.method] or 0) + 1
      end
    end,
  })
  vim.cmd.edit(env.ES_FILE)
  out.attached = wait_for(function()
    local c = es.client()
    return c ~= nil and c.initialized == true
  end)
  local client = es.client()
  out.client_name = client and client.name
  out.inline_provider = client and client.server_capabilities.inlineCompletionProvider ~= nil
  if not client then
    return
  end
  -- wait until the model is loaded (status notification), if the server sends one
  wait_for(function()
    return es.status.state == 'ready' or es.status.state == 'error'
  end, tonumber(env.ES_READY_MS or '20000'))
  out.status = es.status

  local line, col = tonumber(env.ES_LINE), tonumber(env.ES_COL)
  -- 1) inline completion through Neovim's own client: enter insert mode at the cursor and wait
  api.nvim_win_set_cursor(0, { line, col - 1 })
  api.nvim_feedkeys('a', 'n', false)
  out.inline_requested = wait_for(function()
    return (requests['textDocument/inlineCompletion'] or 0) > 0
  end)
  out.inline_ghost = wait_for(function()
    return #extmarks('nvim.lsp.inline_completion') > 0
  end, tonumber(env.ES_GHOST_MS or '3000'))
  local before = table.concat(api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  out.statusline_after_inline = es.statusline()
  if out.inline_ghost then
    out.ghost_screen_line = screen_line(line) -- what the user sees: buffer text + ghost text
    out.ghost_text = table.concat(vim.tbl_map(function(m)
      return table.concat(vim.tbl_map(function(c) return c[1] end, m[4].virt_text or {}), '')
    end, extmarks('nvim.lsp.inline_completion')), '')
  end
  if out.inline_ghost then -- accept with the plugin's <Tab> mapping, as a user would
    api.nvim_feedkeys(vim.keycode('<Tab>'), 'm', false)
    out.inline_accepted = wait_for(function()
      return table.concat(api.nvim_buf_get_lines(0, 0, -1, false), '\n') ~= before
    end, 3000)
  end
  out.inline_changed = table.concat(api.nvim_buf_get_lines(0, 0, -1, false), '\n') ~= before
  out.cursor_after_inline = api.nvim_win_get_cursor(0)
  api.nvim_feedkeys(vim.keycode('<Esc>'), 'n', false)
  sleep(100)
  out.text_after_inline = api.nvim_buf_get_lines(0, 0, -1, false)

  -- the same request made directly, to check the wire shape of the reply
  -- at the end of the accepted line, explicitly: where <Esc> leaves the cursor (one column left, once
  -- Neovim has processed the key) is timing, and a cursor before the last character is another request
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local accepted = api.nvim_buf_get_lines(0, line - 1, line, false)[1] or ''
  params.position = { line = line - 1, character = vim.str_utfindex(accepted, 'utf-16') }
  params.context = { triggerKind = 1 }
  local resp = client:request_sync('textDocument/inlineCompletion', params, timeout, 0)
  out.inline_direct = resp and { replied = true, err = resp.err, result = resp.result } or { timeout = true }

  -- 2) next edit
  local done, shown = false, false
  ne.request(0, function(s)
    done, shown = true, s
  end)
  out.edit_replied = wait_for(function()
    return done
  end)
  out.edit_response = ne.last_response
    and { replied = true, err = ne.last_response.err, result = ne.last_response.result }
  out.edit_shown = shown
  out.edit_extmarks = #extmarks('edit_server.next_edit')
  if shown then -- accept with the plugin's <M-CR> mapping (normal mode)
    local lines_before = table.concat(api.nvim_buf_get_lines(0, 0, -1, false), '\n')
    local sug = ne.shown[api.nvim_get_current_buf()]
    api.nvim_feedkeys(vim.keycode('<M-CR>'), 'm', false)
    out.edit_accepted = wait_for(function() -- gone (the chain's request may show the next one)
      return ne.shown[api.nvim_get_current_buf()] ~= sug
        and table.concat(api.nvim_buf_get_lines(0, 0, -1, false), '\n') ~= lines_before
    end, 3000)
    sleep(200)
  end
  out.text_final = api.nvim_buf_get_lines(0, 0, -1, false)
  local accepts = (out.inline_accepted and 1 or 0) + (out.edit_accepted and 1 or 0)
  out.accepts_answered = wait_for(function() -- the server answers an accept once it is stored
    return (requests['workspace/executeCommand'] or 0) >= accepts
  end, 10000)
  out.requests = requests
  out.status = es.status
  out.statusline = es.statusline()
  if env.ES_HEALTH == '1' then
    vim.cmd('checkhealth edit_server')
    out.health = api.nvim_buf_get_lines(0, 0, -1, false)
  end
  sleep(300) -- let notifications reach the server
end

coroutine.wrap(function()
  local ok, err = xpcall(main, debug.traceback)
  if not ok then
    out.error = tostring(err)
  end
  finish()
end)()
