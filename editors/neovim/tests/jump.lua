-- Headless check of jump targets and chains against a scripted language server (tests/test_editors.py):
-- a far edit / an edit in another file shows a marker at the cursor's line, the accept key goes there
-- and draws it, the next press accepts it, and the accept asks for the next edit at once.
--   nvim --headless --clean -S editors/neovim/tests/jump.lua
-- env: ES_PLUGIN (plugin dir), ES_CMD (JSON list: server command), ES_A / ES_OTHER (the two files; ES_A is
--      edited), ES_OUT (JSON report), ES_TIMEOUT_MS (per wait, default 20000).
local api = vim.api
local env = vim.env
local out = { steps = {} }
local timeout = tonumber(env.ES_TIMEOUT_MS or '20000')

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
    sleep(20)
    waited = waited + 20
  end
  return cond() and true or false
end

local function main()
  vim.opt.rtp:prepend(env.ES_PLUGIN)
  vim.cmd.runtime('plugin/edit_server.lua')
  local es = require('edit_server')
  local ne = require('edit_server.next_edit')
  es.setup({
    cmd = vim.json.decode(env.ES_CMD),
    inline_completion = { enabled = false },
    next_edit = { auto = false },
  })
  local requests = 0 -- copilotInlineEdit requests sent
  api.nvim_create_autocmd('LspRequest', {
    callback = function(ev)
      local r = ev.data.request
      if r.type == 'pending' and r.method == 'textDocument/copilotInlineEdit' then
        requests = requests + 1
      end
    end,
  })
  vim.cmd.edit(env.ES_OTHER) -- both files open (the server knows both), ES_A in the window
  vim.cmd.edit(env.ES_A)
  local a, other = api.nvim_get_current_buf(), vim.fn.bufnr(env.ES_OTHER)
  out.attached = wait_for(function()
    local c = es.client(a)
    return c ~= nil and c.initialized == true and es.client(other) ~= nil
  end)
  if not out.attached then
    return
  end

  -- what the plugin draws, per buffer
  local function marks(buf)
    local res = {}
    for _, m in ipairs(api.nvim_buf_get_extmarks(buf, ne._ns, 0, -1, { details = true })) do
      local d = m[4]
      res[#res + 1] = {
        row = m[2], col = m[3], hl = d.hl_group, virt_pos = d.virt_text_pos,
        virt_text = d.virt_text and table.concat(vim.tbl_map(function(c) return c[1] end, d.virt_text), ''),
        virt_hl = d.virt_text and d.virt_text[1][2],
      }
    end
    return res
  end
  local function state(name)
    local buf = api.nvim_get_current_buf()
    local s = {
      name = name,
      buf = buf == a and 'a' or (buf == other and 'other' or tostring(buf)),
      cursor = api.nvim_win_get_cursor(0),
      requests = requests,
      marks_a = marks(a),
      marks_other = marks(other),
      shown_a = ne.shown[a] ~= nil,
      shown_other = ne.shown[other] ~= nil,
      jump_a = ne.shown[a] and ne.shown[a].jump ~= nil or false,
      jump_other = ne.shown[other] and ne.shown[other].jump ~= nil or false,
      line_a120 = api.nvim_buf_get_lines(a, 119, 120, false)[1],
      line_other12 = api.nvim_buf_get_lines(other, 11, 12, false)[1],
    }
    out.steps[#out.steps + 1] = s
    return s
  end
  -- press the accept key (normal mode, as a user would) and wait for `cond`
  local function press(key, cond)
    api.nvim_feedkeys(vim.keycode(key), 'm', false)
    return wait_for(cond, 3000)
  end
  local function replied_after(prev)
    return function()
      return ne.last_response ~= prev
    end
  end

  -- the client's own test of "far": more than 8 lines below, 6 above, or another document
  out.is_jump = {
    below8 = ne.is_jump(a, { range = { start = { line = 58 } } }, 50),
    below9 = ne.is_jump(a, { range = { start = { line = 59 } } }, 50),
    above6 = ne.is_jump(a, { range = { start = { line = 44 } } }, 50),
    above7 = ne.is_jump(a, { range = { start = { line = 43 } } }, 50),
    flagged = ne.is_jump(a, { jump = true, range = { start = { line = 50 } } }, 50),
    other_uri = ne.is_jump(a, { textDocument = { uri = vim.uri_from_bufnr(other) }, range = { start = { line = 50 } } }, 50),
    same_uri = ne.is_jump(a, { textDocument = { uri = vim.uri_from_bufnr(a) }, range = { start = { line = 50 } } }, 50),
  }

  -- 1) an edit 119 lines below (no `jump` flag): a marker at the cursor's line, nothing drawn there
  api.nvim_win_set_cursor(0, { 1, 0 })
  local done = false
  ne.request(0, function(s)
    out.first_shown = s
    done = true
  end)
  wait_for(function()
    return done
  end)
  state('marker_far')
  -- 2) the accept key jumps: the cursor goes to the edit, drawn in place
  out.jumped = press('<M-CR>', function()
    return api.nvim_win_get_cursor(0)[1] == 120
  end)
  sleep(50)
  state('jumped_far')
  -- 3) the next press accepts; the plugin asks again at once (chain): an edit in other.py (no flag)
  local prev = ne.last_response
  out.accepted_far = press('<M-CR>', function()
    return api.nvim_buf_get_lines(a, 119, 120, false)[1] == 'new = 1'
  end)
  out.chained_far = wait_for(replied_after(prev))
  sleep(100)
  state('marker_other')
  -- 4) the accept key switches to other.py and draws the edit there
  out.jumped_other = press('<M-CR>', function()
    return api.nvim_get_current_buf() == other and ne.shown[other] ~= nil
  end)
  sleep(50)
  state('jumped_other')
  -- 5) accepted in other.py; the chain asks there: a flagged jump one line below (the marker again)
  prev = ne.last_response
  out.accepted_other = press('<M-CR>', function()
    return api.nvim_buf_get_lines(other, 11, 12, false)[1] == 'y = new'
  end)
  out.chained_other = wait_for(replied_after(prev))
  sleep(100)
  state('marker_flagged')
  -- 6) the dismiss key drops the marker: nothing moves, nothing changes
  out.dismissed = press('<M-BS>', function()
    return ne.shown[other] == nil
  end)
  sleep(50)
  state('dismissed')
  -- 7) chain = false: a near edit is drawn in place as before; accepting it asks nothing more
  es.config.next_edit.chain = false
  done = false
  ne.request(0, function(s)
    out.near_shown = s
    done = true
  end)
  wait_for(function()
    return done
  end)
  state('near')
  out.accepted_near = press('<M-CR>', function()
    return ne.shown[other] == nil and api.nvim_buf_get_lines(other, 11, 12, false)[1] == 'y = newer'
  end)
  sleep(400)
  state('no_chain')
  sleep(200) -- let notifications reach the server
end

coroutine.wrap(function()
  local ok, err = xpcall(main, debug.traceback)
  if not ok then
    out.error = tostring(err)
  end
  local f = assert(io.open(env.ES_OUT, 'w'))
  f:write(vim.json.encode(out))
  f:close()
  vim.cmd('qall!')
end)()
