-- gathered_loads.lua (run by t/gathered_loads.sh with KILN_CPU_GATHER_LOADS=1,
-- which lets a CPU plan do what a CUDA plan of reduce-overhead or
-- max-autotune does): an embedding lookup (index_select of rows, then a
-- reshape into B x T rows) runs inside the kernel that reads it, as a
-- gathered load of the table through the index, not as a kernel of its
-- own; results equal the plan without it, bit for bit; a bad index is
-- clamped there, and reported where the plan runs its index ops.
local T = dofile("t/lib/tap.lua")

local gathered_kernel = dofile("t/lib/gathered_kernel.lua")
local kernel_ops = dofile("t/lib/kernel_ops.lua")

-- the suite's tiny BERT and GPT-2 (t/data/real_models), both dtypes
for _, name in ipairs({ "bert", "gpt2" }) do
  local m = kiln.onnx.load("t/data/real_models/" .. name .. "_tiny.onnx")
  local io_t = kiln.load_safetensors("t/data/real_models/" .. name .. "_tiny.io.safetensors")
  for _, dt in ipairs({ "f32", "bf16" }) do
    m:to(dt)
    local xs = {}
    for k, vi in ipairs(m._inputs) do
      local x = io_t[vi.name]
      xs[k] = x.dtype == "f32" and x:to(dt) or x
    end
    local ro = kiln.compile(m, { mode = "reduce-overhead" })
    local plain = kiln.compile(m, { mode = "default" })
    local a, b = ro(table.unpack(xs)), plain(table.unpack(xs))
    local d = (a:to("f64") - b:to("f64")):abs():max():item()
    T.ok(d == 0, string.format("%s %s: gathered in its reader's kernel, the result equals the plan without (max diff %g)",
      name, dt, d))
    local fused, alone = gathered_kernel(ro)
    T.ok(fused and not alone, string.format("%s %s: the token embedding is gathered inside %s", name, dt,
      fused and fused.name or "no generated kernel"))
    -- ONNX's Gather takes negative ids from the end: the importer writes
    -- where(i < 0, i + V, i) + 1, which the gathered load now does itself
    local wrap_alone = kernel_ops(ro, { "lt" }, { "index_select" })
    T.ok(fused and not wrap_alone and fused.source and fused.source:find("kn_gather_row_from_end((", 1, true),
      string.format("%s %s: the ids' wrap (where(i < 0, i + V, i) + 1) runs in the gathered load, not a kernel of its own",
        name, dt))
    local _, plain_alone = gathered_kernel(plain)
    T.ok(plain_alone, name .. " " .. dt .. ": default mode keeps index_select a kernel of its own (it reports a bad index)")
  end
end

-- a bad id: clamped in the gathered load (rows 1 and V), an error where
-- the plan runs its index op
local V, D = 11, 8
local W = kiln.randn({ V, D }, { seed = 3 })
local pos = kiln.randn({ 3, D }, { seed = 4 })
local function embed(ids)
  return W:index_select(1, ids:reshape({ 6 })):reshape({ 2, 3, D }) + pos
end
local good = kiln.tensor({ { 1, 5, V }, { 2, 2, 7 } }, { dtype = "i64" })
local cro = kiln.compile(embed, { mode = "reduce-overhead" })
T.ok((cro(good) - embed(good)):abs():max():item() == 0, "a Lua embedding lookup, gathered: equals eager")
T.ok(gathered_kernel(cro) ~= nil, "and its index_select runs inside the add's kernel")
local bad = kiln.tensor({ { 0, 5, V + 4 }, { 2, 2, 7 } }, { dtype = "i64" })
local clamped = kiln.tensor({ { 1, 5, V }, { 2, 2, 7 } }, { dtype = "i64" })
T.ok((cro(bad) - embed(clamped)):abs():max():item() == 0, "ids 0 and V + 4 read rows 1 and V (clamped, as a replay does)")
local cdef = kiln.compile(embed, { mode = "default" })
local ok, err = pcall(cdef, bad)
T.ok(not ok and tostring(err):find("out of range"), "default mode reports the bad id: " .. tostring(err):sub(1, 80))
-- ONNX's Gather written in Lua: negative ids count from the end
local function onnx_embed(ids)
  local flat = ids:reshape({ 6 })
  return W:index_select(1, kiln.where(flat:lt(0), flat + V, flat) + 1):reshape({ 2, 3, D }) + pos
end
local signed = kiln.tensor({ { -1, 0, V - 1 }, { -V, 4, -3 } }, { dtype = "i64" })
local cwrap = kiln.compile(onnx_embed, { mode = "reduce-overhead" })
local got, want = cwrap(signed), onnx_embed(signed)
T.ok((got - want):abs():max():item() == 0, "ONNX-style ids from -V to V - 1, gathered with their wrap: equals eager")
local wk = gathered_kernel(cwrap)
T.ok(#cwrap:kernels() == 1 and wk and wk.source:find("kn_gather_row_from_end((", 1, true),
  string.format("and the wrap runs in the one gathered kernel (%d kernels: %s)", #cwrap:kernels(), wk and wk.name or "none"))
local past = kiln.tensor({ { -V - 2, 0, V + 3 }, { 2, 2, 7 } }, { dtype = "i64" })
local inside = kiln.tensor({ { 0, 0, V - 1 }, { 2, 2, 7 } }, { dtype = "i64" })
T.ok((cwrap(past) - onnx_embed(inside)):abs():max():item() == 0,
  "ids -V - 2 and V + 3 read the first and the last row (clamped after the wrap)")
-- a near miss: the wrap adds V - 1, not the table's V rows, so the load
-- must not take it over (it runs as arithmetic, and the result is eager's)
local function off_by_one(ids)
  local flat = ids:reshape({ 6 })
  return W:index_select(1, kiln.where(flat:lt(0), flat + (V - 1), flat) + 1):reshape({ 2, 3, D }) + pos
end
local coff = kiln.compile(off_by_one, { mode = "reduce-overhead" })
local okk = kiln.tensor({ { -1, 0, 3 }, { -2, 4, 5 } }, { dtype = "i64" })
local off_diff = (coff(okk) - off_by_one(okk)):abs():max():item()
local ko = gathered_kernel(coff)
T.ok(off_diff == 0 and ko and not ko.source:find("kn_gather_row_from_end((", 1, true),
  "a wrap by V - 1 is not taken for ONNX's: computed as written, equal to eager")
T.done()
