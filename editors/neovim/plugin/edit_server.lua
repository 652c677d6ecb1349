-- edit-server user commands; call require('edit_server').setup({...}) from your config to start it.
if vim.g.loaded_edit_server then
  return
end
vim.g.loaded_edit_server = true

local function cmd(name, fn, desc)
  vim.api.nvim_create_user_command(name, fn, { desc = desc })
end
cmd('EditServerNextEdit', function()
  require('edit_server.next_edit').request(0)
end, 'edit-server: ask for a next edit at the cursor')
cmd('EditServerAccept', function()
  require('edit_server.next_edit').accept(0)
end, 'edit-server: accept the shown next edit')
cmd('EditServerDismiss', function()
  require('edit_server.next_edit').dismiss(0)
end, 'edit-server: dismiss the shown next edit')
cmd('EditServerStatus', function()
  local s = require('edit_server').status
  vim.notify(('edit-server: %s %s'):format(s.state, s.message))
end, 'edit-server: show the server status')
