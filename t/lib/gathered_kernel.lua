-- t/lib/gathered_kernel.lua: where a compiled function's index_select
-- runs. Returns the generated kernel that gathers inside it (nil when
-- none) and whether some kernel runs an index_select alone (a library or
-- reference kernel of its own).
return function(cm)
  local fused, alone = nil, false
  for _, k in ipairs(cm:kernels()) do
    for _, o in ipairs(k.ops or {}) do
      if o == "index_select" then
        if k.kind == "generated" then fused = k else alone = true end
      end
    end
  end
  return fused, alone
end
