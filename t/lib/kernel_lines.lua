-- t/lib/kernel_lines.lua: a compiled function's kernels as text, one line
-- per kernel ("k3_attention_f32_2x8x16x64 library scaled_dot_product_attention
-- causal": name, kind, ops, and "causal" where the mask was folded), then
-- what its plan computes once at the build ("once ..."). Tests compare two
-- compilations' lists with it.
return function(cm)
  local out = {}
  local ks = cm:kernels()
  for _, k in ipairs(ks) do
    out[#out + 1] = string.format("%s %s %s%s", k.name, k.kind, table.concat(k.ops, ","),
      (k.covers or ""):find("%(causal mask folded%)$") and " causal" or "")
  end
  for _, o in ipairs(ks.once or {}) do out[#out + 1] = "once " .. tostring(o.ops) end
  return table.concat(out, "\n")
end
