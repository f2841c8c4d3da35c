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
  -- The console script, not `python3 -m`: Neovim starts servers in the project root, and
  -- `-m` would put it first on sys.path (a repository's struct.py would run). Through an
  -- interpreter, isolate it: { 'python3', '-I', '-m', 'ddp_lsp', 'serve' }.
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
      -- Which ranks run each line: inlay hints 'all' | 'collectives' | 'off', and semantic
      -- tokens (modifiers rankDependent, rankZero) for a highlight group to tint.
      rankView = { hints = 'all', semanticTokens = false },
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
    -- :DdpPreflight probes this machine (progress shows in the LSP progress messages).
    vim.api.nvim_buf_create_user_command(bufnr, 'DdpPreflight', function()
      client:exec_cmd({
        title = 'ddp-lsp: preflight',
        command = 'ddp-lsp.runPreflight',
        arguments = { vim.uri_from_bufnr(bufnr) },
      }, { bufnr = bufnr }, function(err, result)
        if err then
          vim.notify('ddp-lsp preflight: ' .. err.message, vim.log.levels.ERROR)
        elseif result then
          vim.notify('ddp-lsp preflight: ' .. (result.error or result.summary))
        end
      end)
    end, { desc = 'ddp-lsp: run the DDP preflight for this workspace' })
    -- The rank view: inlay hints at each block only some ranks run and on each collective.
    if client:supports_method('textDocument/inlayHint') then
      vim.lsp.inlay_hint.enable(true, { bufnr = bufnr })
    end
    -- :DdpRankPaths lists the rank conditions and early exits that decide which ranks run the
    -- cursor's line (ddp-lsp.showRankPaths) in the quickfix list.
    vim.api.nvim_buf_create_user_command(bufnr, 'DdpRankPaths', function()
      local row = vim.api.nvim_win_get_cursor(0)[1] - 1
      client:exec_cmd({
        title = 'ddp-lsp: rank paths',
        command = 'ddp-lsp.showRankPaths',
        arguments = { vim.uri_from_bufnr(bufnr), { line = row, character = 0 } },
      }, { bufnr = bufnr }, function(err, result)
        if err then
          vim.notify('ddp-lsp rank paths: ' .. err.message, vim.log.levels.ERROR)
        elseif not result or #result == 0 then
          vim.notify('ddp-lsp: every rank runs this line')
        else
          local items = vim.lsp.util.locations_to_items(result, client.offset_encoding)
          vim.fn.setqflist({}, ' ', { title = 'ddp-lsp rank paths', items = items })
          vim.cmd('botright copen')
        end
      end)
    end, { desc = 'ddp-lsp: which rank conditions decide who runs this line' })
    -- The "Run preflight" code lens above init_process_group.
    if client:supports_method('textDocument/codeLens') then
      vim.lsp.codelens.refresh({ bufnr = bufnr })
      vim.api.nvim_create_autocmd({ 'BufEnter', 'InsertLeave', 'BufWritePost' }, {
        buffer = bufnr,
        callback = function() vim.lsp.codelens.refresh({ bufnr = bufnr }) end,
      })
    end
  end,
}
