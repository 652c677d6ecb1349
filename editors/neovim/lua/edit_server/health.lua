-- :checkhealth edit_server — why no suggestion shows: Neovim version, setup(), the server command,
-- the running client and the model state it reported, the last reason a suggestion was hidden.
local M = {}

local health = vim.health

local function check_nvim()
  if vim.fn.has('nvim-0.12') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim ' .. tostring(vim.version()) .. ' is too old', 'edit-server needs Neovim >= 0.12 '
      .. '(vim.lsp.config, vim.lsp.inline_completion)')
  end
end

-- The server command: on PATH (or an absolute path), and it runs (`--version`).
local function check_cmd(cmd)
  if type(cmd) ~= 'table' or type(cmd[1]) ~= 'string' then
    health.info('cmd is a function (custom transport): not checked')
    return
  end
  local exe = vim.fn.exepath(cmd[1])
  if exe == '' then
    health.error(('`%s` not found: it is not on PATH and not an executable path'):format(cmd[1]), {
      'Install the server (README "Try it on a fresh machine": a venv with CPU torch first, then '
        .. '`pip install -e .` in the repo), then either put its venv `bin/` on PATH or set '
        .. "`require('edit_server').setup({ cmd = { '/path/to/.venv/bin/edit-server' } })`",
    })
    return
  end
  health.ok(('server command: %s'):format(exe))
  local ok, res = pcall(function()
    return vim.system({ exe, '--version' }, { text = true }):wait(30000)
  end)
  if not ok or not res or res.code ~= 0 then
    local err = ok and res and vim.trim((res.stderr or '') .. (res.stdout or '')) or tostring(res)
    health.error(('`%s --version` failed: %s'):format(exe, err:sub(-300)), {
      'Run it in a terminal; a missing torch means the venv was set up without `pip install torch==...` first',
    })
  else
    health.ok(('`%s --version`: %s'):format(cmd[1], vim.trim(res.stdout or '')))
  end
end

local function check_client(es)
  local clients = vim.lsp.get_clients({ name = es.config.name })
  if #clients == 0 then
    health.warn('no edit-server client is running', {
      'It starts when a buffer in a `root_markers` project (' .. table.concat(es.config.root_markers or {}, ', ')
        .. ') is opened; see :LspLog for start errors',
    })
    return
  end
  local attached = es.client(0) ~= nil
  health.ok(('client running (id %d)%s'):format(clients[1].id, attached and ', attached to this buffer' or ''))
  local s = es.status
  local line = ('model: %s%s'):format(s.state, s.message ~= '' and (' — ' .. s.message) or '')
  if s.state == 'error' then
    health.error(line)
  elseif s.state == 'ready' or s.state == 'busy' then
    health.ok(line)
  else
    health.warn(line)
  end
  if s.hidden ~= '' then
    local gate = s.hidden:find('by the gate', 1, true) ~= nil
    health.warn('last suggestion: ' .. s.hidden, {
      gate and ('the show/hide gate hid it: a random (tiny-random) or untrained model scores low; '
        .. 'init_options = { gate = { enabled = false } } shows every suggestion')
        or ('the model left no text to show: random weights (tiny-random) emit no valid text; '
          .. "model = 'default' or a trained model"),
    })
  end
end

function M.check()
  health.start('edit-server')
  check_nvim()
  local es = require('edit_server')
  if not es.did_setup then
    health.warn("require('edit_server').setup({...}) has not been called", {
      'call it from your config (editors/README.md); until then no server starts',
    })
  end
  check_cmd(es.config.cmd)
  if es.did_setup then
    check_client(es)
    local ic = vim.lsp.inline_completion and vim.lsp.inline_completion.is_enabled()
    if es.config.inline_completion.enabled and not ic then
      health.warn('vim.lsp.inline_completion is disabled: no ghost text')
    end
  end
end

return M
