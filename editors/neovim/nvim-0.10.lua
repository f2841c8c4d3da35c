-- ddp-lsp for Neovim 0.10 (vim.lsp.start, no vim.lsp.config yet).
--
-- Source this from init.lua:  dofile('/path/to/editors/neovim/nvim-0.10.lua')
vim.api.nvim_create_autocmd('FileType', {
  pattern = 'python',
  group = vim.api.nvim_create_augroup('ddp_lsp', { clear = true }),
  callback = function(args)
    local root = vim.fs.root(args.buf, { 'pyproject.toml', 'setup.cfg', 'setup.py', '.git' })
    vim.lsp.start({
      name = 'ddp_lsp',
      -- The console script, not `python3 -m`: Neovim starts servers in the project root, and
      -- `-m` would put it first on sys.path (a repository's struct.py would run). Through an
      -- interpreter, isolate it: { 'python3', '-I', '-m', 'ddp_lsp', 'serve' }.
      cmd = { 'ddp-lsp', 'serve' },
      root_dir = root or vim.fn.getcwd(),
      settings = { ['ddp-lsp'] = { enable = true } },
    }, { bufnr = args.buf })
  end,
})
