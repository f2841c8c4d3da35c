-- ddp-lsp for Neovim >= 0.11 (vim.lsp.config / vim.lsp.enable).
--
-- Put this directory on 'runtimepath' (or copy this file to ~/.config/nvim/lsp/ddp_lsp.lua),
-- then enable it from init.lua:
--
--   vim.lsp.enable('ddp_lsp')
--
-- Override anything with vim.lsp.config('ddp_lsp', { settings = { ['ddp-lsp'] = {...} } }).
-- Settings are also read from [tool.ddp-lsp] in the nearest pyproject.toml, which wins.
return {
  cmd = { 'ddp-lsp', 'serve' },
  filetypes = { 'python' },
  root_markers = { 'pyproject.toml', 'setup.cfg', 'setup.py', '.git' },
  -- Sent with workspace/didChangeConfiguration and returned for workspace/configuration
  -- (section 'ddp-lsp').
  settings = {
    ['ddp-lsp'] = {
      enable = true,
      select = { 'DDP' },
      ignore = {},
      severity = vim.empty_dict(), -- e.g. { DDP102 = 'hint' }
      rankGuardNames = {},
      assumeDistributed = false,
      exclude = {},
    },
  },
  on_attach = function(client, bufnr)
    -- ddp-lsp.fixAll on demand: :DdpFixAll
    vim.api.nvim_buf_create_user_command(bufnr, 'DdpFixAll', function()
      client:exec_cmd({
        title = 'ddp-lsp: fix all',
        command = 'ddp-lsp.fixAll',
        arguments = { vim.uri_from_bufnr(bufnr) },
      }, { bufnr = bufnr })
    end, { desc = 'ddp-lsp: apply every safe fix in this buffer' })
  end,
}
