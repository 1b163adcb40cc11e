-- t/lib/kernel_ops.lua: whether some kernel of a compiled function runs
-- every op of `with` and none of `without` (lists of op names, as
-- cm:kernels() gives a kernel's ops): "a kernel holds the layer norm and
-- the mask's cast", "a kernel computes lt without an index_select".
return function(cm, with, without)
  for _, k in ipairs(cm:kernels()) do
    local has = {}
    for _, o in ipairs(k.ops or {}) do has[o] = true end
    local ok = true
    for _, o in ipairs(with) do ok = ok and has[o] == true end
    for _, o in ipairs(without or {}) do ok = ok and not has[o] end
    if ok then return true end
  end
  return false
end
