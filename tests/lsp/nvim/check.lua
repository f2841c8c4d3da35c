-- Open the training script, wait for ddp-lsp's diagnostics, apply the preferred DDP201 fix,
-- wait for the diagnostic to go away; write what happened as JSON and quit.
local result = { steps = {} }
local function step(name) table.insert(result.steps, name) end

local function finish()
  local f = assert(io.open(os.getenv('DDP_NVIM_RESULT'), 'w'))
  f:write(vim.json.encode(result))
  f:close()
  vim.cmd('qa!')
end

local function ddp201(buf)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    if d.code == 'DDP201' then table.insert(out, d) end
  end
  return out
end

local ok, err = pcall(function()
  vim.cmd.edit(os.getenv('DDP_NVIM_FILE'))
  local buf = vim.api.nvim_get_current_buf()
  result.filetype = vim.bo[buf].filetype
  if not vim.wait(30000, function() return #vim.lsp.get_clients({ bufnr = buf, name = 'ddp_lsp' }) > 0 end, 20) then
    return
  end
  step('attached')
  local client = vim.lsp.get_clients({ bufnr = buf, name = 'ddp_lsp' })[1]
  result.encoding = client.offset_encoding
  if not vim.wait(30000, function() return #ddp201(buf) > 0 end, 20) then return end
  step('diagnostics')
  result.diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    table.insert(result.diagnostics, { code = d.code, lnum = d.lnum, col = d.col, source = d.source,
                                       severity = d.severity })
  end
  -- The "Run preflight" lens from on_attach's codelens.refresh (above init_process_group).
  if vim.wait(30000, function() return #vim.lsp.codelens.get(buf) > 0 end, 20) then
    result.lenses = {}
    for _, lens in ipairs(vim.lsp.codelens.get(buf)) do
      table.insert(result.lenses, { line = lens.range.start.line, title = lens.command and lens.command.title })
    end
  end
  local d = ddp201(buf)[1]
  vim.api.nvim_win_set_cursor(0, { d.lnum + 1, d.col })
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(action) return action.isPreferred and action.title:find('DDP201', 1, true) ~= nil end,
  })
  if not vim.wait(30000, function()
    local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    return text:find('scaler.unscale_(optimizer)', 1, true) ~= nil
  end, 20) then return end
  step('applied')
  if not vim.wait(30000, function() return #ddp201(buf) == 0 end, 20) then return end
  step('cleared')
  result.text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
  -- The rank view: inlay hints (on_attach enables them) and :DdpRankPaths.
  local function hints()
    local out = {}
    for _, h in ipairs(vim.lsp.inlay_hint.get({ bufnr = buf })) do
      local label = h.inlay_hint.label
      if type(label) == 'table' then
        local parts = {}
        for _, p in ipairs(label) do table.insert(parts, p.value) end
        label = table.concat(parts)
      end
      table.insert(out, { line = h.inlay_hint.position.line, label = label })
    end
    return out
  end
  -- Wait for the hints of the fixed text: until Neovim asks again after the edit, it still
  -- shows the hints of the text before it (one line higher below the fix).
  if not vim.wait(30000, function()
    for _, h in ipairs(hints()) do
      local line = vim.api.nvim_buf_get_lines(buf, h.line, h.line + 1, false)[1] or ''
      if h.label:find('⚠', 1, true) and line:find('dist.barrier()', 1, true) then return true end
    end
    return false
  end, 20) then return end
  step('hints')
  result.hints = hints()
  local barrier
  for i, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line:find('dist.barrier()', 1, true) then barrier = i end
  end
  vim.api.nvim_win_set_cursor(0, { barrier, 12 })
  vim.cmd('DdpRankPaths')
  if not vim.wait(30000, function() return #vim.fn.getqflist() > 0 end, 20) then return end
  step('paths')
  result.paths = {}
  for _, item in ipairs(vim.fn.getqflist()) do
    table.insert(result.paths, { lnum = item.lnum, col = item.col })
  end
end)
if not ok then result.error = tostring(err) end
finish()
