-- Test init: the shipped config from editors/neovim, nothing else.
vim.opt.runtimepath:prepend(os.getenv('DDP_NVIM_CONFIG_DIR'))
vim.opt.swapfile = false
vim.lsp.enable('ddp_lsp')
