-- stored_rows.lua: a pointwise value with several readers, the first a
-- row op reading it as its row (a pre-norm transformer's residual sum,
-- h = x + a, then layer_norm(h), and h read again by the next residual
-- add), is computed inside that row op's kernel, which stores it for the
-- later readers: one kernel and one pass over h fewer. Compiled equals
-- eager (relative to the largest value: f32 1e-5, bf16 0.05), in
-- the default and the reduce-overhead modes, with a softmax and a sum as
-- the row op too, and where the first reader is not a row op the value
-- keeps a kernel of its own. Also a small value of the inputs riding on a
-- row kernel with its rows' shape (BERT's padding mask). On the CPU, and on
-- the GPU where there is one.
local T = dofile("t/lib/tap.lua")
local kernel_ops = dofile("t/lib/kernel_ops.lua")

-- max |a - b| / max(1, max |b|), in f64 on the CPU; NaN or a shape
-- mismatch gives math.huge
local function maxdiff(a, b)
  if table.concat(a:shape(), "x") ~= table.concat(b:shape(), "x") then return math.huge end
  a, b = a:to("cpu"):to("f64"), b:to("cpu"):to("f64")
  local d = (a - b):abs():max():item() / math.max(1, b:abs():max():item())
  return d == d and d or math.huge
end

local function kernels_with(cm, op)
  local n, names = 0, {}
  for _, k in ipairs(cm:kernels()) do
    for _, o in ipairs(k.ops or {}) do
      if o == op then
        n = n + 1
        names[#names + 1] = k.name
        break
      end
    end
  end
  return n, table.concat(names, " ")
end

local D = 48
local w, b = kiln.randn({ D }, { seed = 1 }), kiln.randn({ D }, { seed = 2 })
local cases = {
  { "layer_norm", function(x, a) local h = x + a; return kiln.layer_norm(h, { D }, w, b), h * 2 end },
  { "softmax", function(x, a) local h = x + a; return h:softmax(-1), h - 1 end },
  { "sum", function(x, a) local h = (x * a):exp(); return h:sum(-1), h + x end },
}
-- on the CPU, and on the GPU where there is one (its row kernels keep the
-- row in registers and store the value from there)
local DEVICES = { "cpu", kiln.cuda_available() and "cuda" or nil }
for _, dev in ipairs(DEVICES) do
for _, case in ipairs(cases) do
  local what, fn = case[1], case[2]
  w, b = w:to(dev), b:to(dev)
  for _, dt in ipairs({ "f32", "bf16" }) do
    local x, a = kiln.randn({ 3, 5, D }, { seed = 3 }):to(dt):to(dev), kiln.randn({ 3, 5, D }, { seed = 4 }):to(dt):to(dev)
    local tol = dt == "f32" and 1e-5 or 0.05
    for _, mode in ipairs({ "default", "reduce-overhead" }) do
      local cm = kiln.compile(fn, { mode = mode })
      local y1, y2 = cm(x, a)
      local e1, e2 = fn(x, a)
      local d1, d2 = maxdiff(y1, e1), maxdiff(y2, e2)
      T.ok(d1 <= tol and d2 <= tol, string.format("%s %s %s %s: both results equal eager (max diff %.3g, %.3g)",
        dev, what, dt, mode, d1, d2))
    end
    local cm = kiln.compile(fn)
    cm(x, a)
    local n_row, names = kernels_with(cm, what)
    local n_first = kernels_with(cm, what == "sum" and "exp" or "add")
    T.ok(n_row == 1 and n_first == 1 and names:find(what == "sum" and "exp" or "add", 1, true) ~= nil,
      dev .. " " .. what .. " " .. dt .. ": the value is computed in the " .. what .. "'s kernel (" .. names .. ")")
  end
end
end
w, b = w:to("cpu"), b:to("cpu")

-- the first reader is pointwise: the value keeps a kernel of its own
local function later(x, a) local h = x + a; return h * 2, kiln.layer_norm(h, { D }, w, b) end
local cl = kiln.compile(later)
-- on the CPU, as w and b (the default device is the GPU where there is one)
local x, a = kiln.randn({ 3, 5, D }, { seed = 5, device = "cpu" }), kiln.randn({ 3, 5, D }, { seed = 6, device = "cpu" })
local y1, y2 = cl(x, a)
local e1, e2 = later(x, a)
T.ok(maxdiff(y1, e1) <= 1e-5 and maxdiff(y2, e2) <= 1e-5, "first read by a mul: equals eager")
local _, ln_names = kernels_with(cl, "layer_norm")
T.ok(not ln_names:find("add", 1, true), "and the add is not in the layer norm's kernel (" .. ln_names .. ")")

-- a small value of the inputs with the shape of a row kernel's rows (BERT's
-- padding mask: the ids' mask as an additive B x T bias, beside the
-- embeddings' layer norm over B x T rows) is computed by that row kernel,
-- once a row, when every reader comes after it; bf16 on the GPU too
local B, Tn = 3, 5
local function masked(x, m)
  local bias = (1 - m:to(x.dtype)) * -1e4 -- B x T, from an i64 mask
  local h = kiln.layer_norm(x + 1, { D }, w, b)
  return h + bias:reshape({ B, Tn, 1 })
end
-- the same with the mask first read after the layer norm: its input comes
-- after the row kernel in graph order, and is bound before that kernel runs
local function masked_late(x, m)
  local h = kiln.layer_norm(x + 1, { D }, w, b)
  local bias = (1 - m:to(x.dtype)) * -1e4
  return h + bias:reshape({ B, Tn, 1 })
end
local ids_mask = kiln.tensor({ { 1, 1, 1, 0, 0 }, { 1, 1, 1, 1, 1 }, { 1, 0, 0, 0, 0 } }, { dtype = "i64" })
for _, dev in ipairs(DEVICES) do
  w, b = w:to(dev), b:to(dev)
  for _, case in ipairs({ { "mask first", masked }, { "mask after", masked_late } }) do
    local fn = case[2]
    for _, dt in ipairs({ "f32", "bf16" }) do
      local xm = kiln.randn({ B, Tn, D }, { seed = 7 }):to(dt):to(dev)
      local mm = ids_mask:to(dev)
      local tol = dt == "f32" and 1e-5 or 0.05
      for _, mode in ipairs({ "default", "reduce-overhead" }) do
        local cm = kiln.compile(fn, { mode = mode })
        local d = maxdiff(cm(xm, mm), fn(xm, mm))
        local n_ln, names = kernels_with(cm, "layer_norm")
        local n_cast = kernels_with(cm, "cast")
        T.ok(d <= tol and #cm:kernels() == 2 and n_ln == 1 and n_cast == 1,
          string.format("%s %s %s %s: the mask rides on the layer norm's kernel (%d kernels: %s), equal to eager (%.3g)",
            dev, case[1], dt, mode, #cm:kernels(), names, d))
        T.ok(kernel_ops(cm, { "layer_norm", "cast" }), string.format("%s %s %s %s: one kernel holds the layer norm and the mask's ops", dev, case[1], dt, mode))
      end
    end
  end
end
w, b = w:to("cpu"), b:to("cpu")
-- a near miss: a mask of another shape than the rows
local function wider(x, m)
  local bias = (1 - m:to(x.dtype)) * -1e4 -- B x (T + 1): not the rows' shape
  local h = kiln.layer_norm(x + 1, { D }, w, b)
  return h + bias:slice(2, 1, Tn):reshape({ B, Tn, 1 })
end
local wide_mask = kiln.tensor({ { 1, 1, 1, 0, 0, 1 }, { 1, 1, 1, 1, 1, 1 }, { 1, 0, 0, 0, 0, 1 } }, { dtype = "i64", device = "cpu" })
local xc = kiln.randn({ B, Tn, D }, { seed = 8, device = "cpu" })
local cw = kiln.compile(wider)
local dw = maxdiff(cw(xc, wide_mask), wider(xc, wide_mask))
T.ok(dw <= 1e-5 and #cw:kernels() == 3, string.format("a B x (T + 1) mask keeps a kernel of its own (%d kernels), equal to eager (%.3g)",
  #cw:kernels(), dw))
-- a near miss: the mask viewed before the layer norm in graph order (the
-- view runs there, where a value the row kernel would compute does not
-- exist yet: this call failed with "view of a missing value")
local function viewed_first(x, m)
  local bias = ((1 - m:to(x.dtype)) * -1e4):reshape({ B, Tn, 1 })
  local h = kiln.layer_norm(x + 1, { D }, w, b)
  return h + bias
end
local cv = kiln.compile(viewed_first)
local okv, yv = pcall(cv, xc, ids_mask:to("cpu"))
local dv = okv and maxdiff(yv, viewed_first(xc, ids_mask:to("cpu"))) or math.huge
T.ok(okv and dv <= 1e-5 and #cv:kernels() == 3,
  string.format("a mask viewed before the layer norm keeps a kernel of its own (%d kernels), equal to eager (%s)",
    #cv:kernels(), okv and string.format("%.3g", dv) or tostring(yv)))
T.done()
