-- ddp-lsp with nvim-lspconfig (for setups that still use require('lspconfig')).
--
-- nvim-lspconfig does not ship a ddp_lsp entry, so register one, then set it up:
--
--   require('ddp_lsp_lspconfig')      -- this file, placed under lua/ on 'runtimepath'
--   require('lspconfig').ddp_lsp.setup({})
local configs = require('lspconfig.configs')
local util = require('lspconfig.util')

if not configs.ddp_lsp then
  configs.ddp_lsp = {
    default_config = {
      -- The console script, not `python3 -m`: Neovim starts servers in the project root, and
      -- `-m` would put it first on sys.path (a repository's struct.py would run). Through an
      -- interpreter, isolate it: { 'python3', '-I', '-m', 'ddp_lsp', 'serve' }.
      cmd = { 'ddp-lsp', 'serve' },
      filetypes = { 'python' },
      root_dir = util.root_pattern('pyproject.toml', 'setup.cfg', 'setup.py', '.git'),
      single_file_support = true,
      settings = { ['ddp-lsp'] = { enable = true } },
    },
    docs = {
      description = 'ddp-lsp: reviews PyTorch DDP and AMP training code (diagnostics, quick fixes).',
    },
  }
end

return configs.ddp_lsp
