-- t/cuda_ops.lua: the CUDA template ops (kernels/cuda/kn_cuda_ops.c) against
-- the CPU reference on the same inputs: multi-dim reductions, max with
-- indices, the pools, cat, index_select / gather / index_add (and their
-- range errors), the random ops (bit-exact for a seed) and copies / casts;
-- and compiled generated kernels (vector loads, rows in registers or per
-- block) on awkward sizes and views against f64 on the CPU.
-- Inputs are made on the CPU with a seed and moved with :to("cuda").
local T = dofile("t/lib/tap.lua")

if not pcall(kiln.zeros, {1}, {device = "cuda"}) then T.skip_all("no CUDA device") end

local DEV = "cuda"
local FLOATS = {"f32", "f64", "bf16", "f16"}
local ALL = {"f32", "f64", "bf16", "f16", "i32", "i64", "bool"}
local INTS = {i32 = true, i64 = true, bool = true}

-- the elements of a tensor (any device) as a flat Lua list
local function flat(t)
  local out = {}
  local function rec(v)
    if type(v) == "table" then
      for _, e in ipairs(v) do rec(e) end
    else
      out[#out + 1] = v
    end
  end
  rec(t:to("cpu"):tolist())
  return out
end

local function shape_str(t) return "{" .. table.concat(t:shape(), ",") .. "}" end

-- got (CUDA) against want (CPU): same shape, dtype, device cuda, and every
-- element equal (rtol nil) or within rtol relative (+ a tiny absolute);
-- NaN matches only NaN.
local function same(got, want, name, rtol, atol)
  if not T.is(got.device, DEV, name .. ": on the GPU") then return end
  if not T.is(got.dtype, want.dtype, name .. ": dtype") then return end
  if not T.is(shape_str(got), shape_str(want), name .. ": shape") then return end
  local g, w = flat(got), flat(want)
  for i = 1, #w do
    local a, b = g[i], w[i]
    local good
    if type(b) ~= "number" then
      good = a == b
    elseif b ~= b then
      good = a ~= a
    elseif rtol then
      good = a == a and math.abs(a - b) <= rtol * math.abs(b) + (atol or 1e-9)
    else
      good = a == b
    end
    if not good then
      T.ok(false, string.format("%s: element %d: got %s, expected %s", name, i, tostring(a), tostring(b)))
      return
    end
  end
  T.ok(true, name .. ": " .. #w .. " elements match")
end

-- a CPU tensor of dtype dt: normal floats, small integers (ties), bools
local seed = 100
local function make(shape, dt, lo, hi)
  seed = seed + 1
  if dt == "bool" then return kiln.randint(0, 2, shape, {seed = seed, dtype = "bool", device = "cpu"}) end
  if INTS[dt] then return kiln.randint(lo or -50, hi or 50, shape, {seed = seed, dtype = dt, device = "cpu"}) end
  return kiln.randn(shape, {seed = seed, device = "cpu"}):to(dt)
end

local function rtol_of(dt) return (dt == "bf16" or dt == "f16") and 1e-2 or 1e-6 end

-- the same view of a CPU tensor and of its CUDA copy, taken on each device
-- so that the CUDA kernels see the view's strides
local VIEWS = {
  {"", function(t) return t end},
  {" (transposed view)", function(t) return t:transpose(1, t:dim()) end},
}
local function pair(x, view) return view(x), view(x:to(DEV)) end

---------------------------------------------------------------- reductions
do
  local cases = {
    {{4, 5, 6}, {1, 3}}, {{4, 5, 6}, {2, 3}}, {{4, 5, 6}, nil}, {{3, 1, 7}, {2, 3}},
    {{2, 3, 4, 5}, {1, 2, 4}}, {{300, 40}, {1, 2}}, {{70000}, nil}, {{2, 70001}, {1, 2}},
    {{3, 40000}, {2}}, {{6}, {1}},
    -- columns (a bias's gradient over the rows) and BatchNorm's
    -- statistics over N, H and W, at sizes where outputs are split
    {{4096, 96}, {1}}, {{517, 3, 50}, {1}}, {{8, 16, 40, 40}, {1, 3, 4}},
    -- columns over two leading dims (kn_reduce_cols): one block of rows,
    -- and a training step's bias gradient, split over the rows
    {{2, 30, 33}, {1, 2}}, {{16, 64, 1000}, {1, 2}},
  }
  for _, dt in ipairs(ALL) do
    local ops = INTS[dt] and {"sum", "amax", "amin"} or {"sum", "mean", "amax", "amin", "var"}
    for ci, case in ipairs(cases) do
      if dt ~= "bool" or ci <= 5 then
        local x = make(case[1], dt)
        for _, v in ipairs(VIEWS) do
          local xv, xc = pair(x, v[2])
          for _, op in ipairs(ops) do
            local name = string.format("%s %s %s dims %s%s", op, dt, shape_str(x),
              case[2] and table.concat(case[2], ",") or "all", v[1])
            local tol = (op == "amax" or op == "amin" or INTS[dt]) and nil or rtol_of(dt)
            if case[2] then
              same(xc[op](xc, case[2]), xv[op](xv, case[2]), name, tol)
              same(xc[op](xc, case[2], true), xv[op](xv, case[2], true), name .. " keepdim", tol)
            else
              same(xc[op](xc), xv[op](xv), name, tol)
            end
          end
        end
      end
    end
  end
  -- var's correction, and NaN that must propagate through every reduction
  local x = make({5, 6, 7}, "f32")
  for _, corr in ipairs({0, 1, 2}) do
    same(x:to(DEV):var({1, 3}, {correction = corr}), x:var({1, 3}, {correction = corr}),
      "var correction " .. corr, 1e-6)
  end
  -- a column var (kn_reduce_cols, split over the rows) of values far from
  -- zero: the deviations are taken from each block's mean, then merged
  local far = make({6000, 40}, "f32") + 1000
  same(far:to(DEV):var({1}), far:var({1}), "column var of values near 1000, split over the rows", 1e-6)
  same(far:to(DEV):var({1}, {correction = 0}), far:var({1}, {correction = 0}), "... population var", 1e-6)
  -- f32 statistics of a bf16 channels-last value, compiled: the column
  -- kernel reads bf16 and writes f32 (the reductions pass folds the cast
  -- in), over 720 rows split 11 ways; values near 0 and near 100
  for _, shift in ipairs({0, 100}) do
    local xb = make({8, 9, 10, 40}, "bf16") + shift
    local function stats(v)
      v = v:permute({1, 4, 2, 3})
      return v:mean({1, 3, 4}), v:var({1, 3, 4}, {correction = 0}), v:var({1, 3, 4})
    end
    local cm = kiln.compile(function(t) return stats(t:to("f32")) end)
    local got, ref = {cm(xb:to(DEV))}, {stats(xb:to("f64"))}
    for k, what in ipairs({"mean", "population var", "var"}) do
      same(got[k], ref[k]:to("f32"), string.format("compiled f32 %s of a bf16 channels-last value near %d", what, shift), 1e-6, 1e-6)
    end
  end
  local xn = x:masked_fill(x:gt(1.2), 0 / 0)
  for _, op in ipairs({"sum", "mean", "amax", "amin", "var"}) do
    same(xn:to(DEV)[op](xn:to(DEV), {1, 2}), xn[op](xn, {1, 2}), op .. " with NaN", 1e-6)
    same(xn:to(DEV)[op](xn:to(DEV)), xn[op](xn), op .. " with NaN, all dims", 1e-6)
  end
  -- sums of ints and bools are i64
  T.is(make({4, 4}, "i32"):to(DEV):sum({1, 2}).dtype, "i64", "sum of i32 is i64")
  T.is(make({4, 4}, "bool"):to(DEV):sum().dtype, "i64", "sum of bool is i64")
end

---------------------------------------------------------------- max(dim)
do
  local cases = {{{4, 5, 6}, 1}, {{4, 5, 6}, 2}, {{4, 5, 6}, 3}, {{3, 1, 7}, 2}, {{3, 5000}, 2},
                 {{5000, 3}, 1}, {{7}, 1}}
  for _, dt in ipairs(ALL) do
    for _, case in ipairs(cases) do
      local x = make(case[1], dt, -3, 3) -- a small range makes ties: the first index must win
      for _, v in ipairs(VIEWS) do
        local xv, xc = pair(x, v[2])
        local name = string.format("max %s %s dim %d%s", dt, shape_str(x), case[2], v[1])
        local cv, ci = xc:max(case[2])
        local rv, ri = xv:max(case[2])
        same(cv, rv, name .. " values")
        same(ci, ri, name .. " indices")
        cv, ci = xc:max(case[2], true)
        rv, ri = xv:max(case[2], true)
        same(ci, ri, name .. " keepdim indices")
      end
    end
  end
  for _, dt in ipairs(FLOATS) do
    local x = make({6, 9}, dt)
    local xn = x:masked_fill(x:gt(0.8), 0 / 0)
    local cv, ci = xn:to(DEV):max(2)
    local rv, ri = xn:max(2)
    same(cv, rv, "max with NaN " .. dt .. " values")
    same(ci, ri, "max with NaN " .. dt .. " indices (the first NaN)")
  end
end

---------------------------------------------------------------- pools
do
  local pools = {
    {"max_pool2d", {3}}, {"max_pool2d", {3, 2, 1}}, {"max_pool2d", {{3, 2}, {2, 1}, {1, 0}, true}},
    {"max_pool2d", {2, {stride = 3, ceil_mode = true}}},
    {"avg_pool2d", {3}}, {"avg_pool2d", {3, 2, 1}}, {"avg_pool2d", {3, 2, 1, false, false}},
    {"avg_pool2d", {{3, 2}, {2, 1}, {1, 1}, true, true}}, {"avg_pool2d", {{3, 2}, {2, 1}, {1, 1}, true, false}},
    {"adaptive_avg_pool2d", {{4, 5}}}, {"adaptive_avg_pool2d", {1}}, {"adaptive_avg_pool2d", {{7, 3}}},
    {"adaptive_avg_pool2d", {{9, 11}}},
  }
  for _, dt in ipairs(FLOATS) do
    for _, shape in ipairs({{2, 3, 9, 11}, {3, 8, 8}, {1, 1, 9, 11}}) do
      local x = make(shape, dt)
      if #shape == 4 and shape[1] == 2 then x = x:masked_fill(x:gt(2.2), 0 / 0) end
      local vs = {{"", function(t) return t end},
                  {" (transposed h, w)", function(t) return t:transpose(#shape - 1, #shape) end}}
      for _, v in ipairs(vs) do
        for _, p in ipairs(pools) do
          local xv, xc = pair(x, v[2])
          local args = p[2]
          local name = string.format("%s %s %s args %d%s", p[1], dt, shape_str(xv), #args, v[1])
          local okc, got = pcall(kiln[p[1]], xc, table.unpack(args))
          local okr, want = pcall(kiln[p[1]], xv, table.unpack(args))
          if okr then
            if T.ok(okc, name .. " runs") then same(got, want, name) end
          else
            T.ok(not okc, name .. " fails on both")
          end
        end
      end
    end
  end
end

-- The global average pool of contiguous planes (a warp a plane): planes of
-- 14 x 14 (convnet's last block: the four-load loop) and 33 x 35 (several
-- of its rounds and a tail), a plane holding a NaN and one holding an
-- infinity; bit for bit the CPU's, whose double sums of these values are
-- exact in any order. f64 keeps the one-thread-a-plane kernel.
do
  for _, dt in ipairs(FLOATS) do
    for _, shape in ipairs({{2, 40, 14, 14}, {1, 3, 33, 35}}) do
      local hw = shape[3] * shape[4]
      local at = kiln.arange(0, shape[1] * shape[2] * hw, {device = "cpu"})
      local x = make(shape, dt):reshape({-1})
      x = x:masked_fill(at:eq(hw + 5), 0 / 0):masked_fill(at:eq(2 * hw + 7), 1 / 0):reshape(shape)
      local name = string.format("adaptive_avg_pool2d(1) %s %s, contiguous planes", dt, shape_str(x))
      same(kiln.adaptive_avg_pool2d(x:to(DEV), 1), kiln.adaptive_avg_pool2d(x, 1), name)
    end
  end
end

---------------------------------------------------------------- cat
do
  for _, dt in ipairs(ALL) do
    local a, b, c = make({2, 3, 4}, dt), make({2, 5, 4}, dt), make({2, 1, 4}, dt)
    same(kiln.cat({a:to(DEV), b:to(DEV), c:to(DEV)}, 2), kiln.cat({a, b, c}, 2), "cat " .. dt .. " dim 2")
    local d, e = make({3, 2, 4}, dt), make({1, 2, 4}, dt)
    same(kiln.cat({d:to(DEV), e:to(DEV)}, 1), kiln.cat({d, e}, 1), "cat " .. dt .. " dim 1")
    local f = make({2, 3, 6}, dt)
    same(kiln.cat({a:to(DEV), f:to(DEV)}, -1), kiln.cat({a, f}, -1), "cat " .. dt .. " dim -1")
    -- strided inputs: a transposed view and a slice with a step
    local function gv(t) return t:transpose(1, 3) end
    local function hv(t) return t:slice(3, 1, 8, 2) end
    local g0, h0 = make({4, 3, 2}, dt), make({2, 3, 9}, dt)
    local g, gc = pair(g0, gv)
    local h, hc = pair(h0, hv)
    same(kiln.cat({gc, a:to(DEV), hc}, 3), kiln.cat({g, a, h}, 3), "cat " .. dt .. " strided inputs")
    same(kiln.cat({gc:transpose(1, 2), a:to(DEV):transpose(1, 2)}, 1),
      kiln.cat({g:transpose(1, 2), a:transpose(1, 2)}, 1), "cat " .. dt .. " of transposed views")
    -- im2col's cat: shifted windows of a padded batch, rows whose length
    -- is and is not a multiple of a thread's run (KN_T_RUN, 8)
    for _, w in ipairs({ 7, 8, 14 }) do
      local xp = make({ 2, 3, 5, w + 2 }, dt)
      local wins, dwins = {}, {}
      for k = 0, 2 do
        wins[k + 1] = xp:slice(4, 1 + k, w + k):unsqueeze(2)
        dwins[k + 1] = xp:to(DEV):slice(4, 1 + k, w + k):unsqueeze(2)
      end
      same(kiln.cat(dwins, 2), kiln.cat(wins, 2), "cat " .. dt .. " of shifted windows, rows of " .. w)
      same(xp:to(DEV):slice(4, 2, w + 1):contiguous(), xp:slice(4, 2, w + 1):contiguous(),
        "contiguous " .. dt .. " of a window, rows of " .. w)
      -- a stride-2 gradient's zero insertion: cat along a new last dim of 2
      local z = make({ 2, 3, 5, w, 1 }, dt)
      local g1 = xp:slice(4, 1, w):unsqueeze(5)
      same(kiln.cat({ g1:to(DEV), z:to(DEV) }, 5), kiln.cat({ g1, z }, 5), "cat " .. dt .. " along a new last dim of 2, rows of " .. w)
    end
  end
  -- more inputs than one call takes, an empty input, mixed dtypes
  local list, dlist = {}, {}
  for i = 1, 11 do
    list[i] = make({i % 3 + 1, 4}, "f32")
    dlist[i] = list[i]:to(DEV)
  end
  same(kiln.cat(dlist, 1), kiln.cat(list, 1), "cat of 11 inputs")
  -- a class token expanded over the batch (stride 0) before the patches:
  -- whole row parts, 16 bytes a thread where they allow (16 wide), else one element (3 wide)
  for _, dt in ipairs(ALL) do
    for _, w in ipairs({16, 3}) do
      local cls, x = make({1, 1, w}, dt), make({4, 5, w}, dt)
      same(kiln.cat({cls:to(DEV):expand({4, 1, w}), x:to(DEV)}, 2), kiln.cat({cls:expand({4, 1, w}), x}, 2),
        "cat of an expanded token and rows " .. dt .. " width " .. w)
      same(kiln.cat({x:to(DEV), x:to(DEV):slice(2, 2, 4, 1)}, 2), kiln.cat({x, x:slice(2, 2, 4, 1)}, 2),
        "cat of rows and a sliced view " .. dt .. " width " .. w)
    end
  end
  -- along the last dim, rows of at most 32 (kn_cat_short, a thread a row)
  -- and longer (kn_cat): the padded image of a channels-last weight
  -- gradient, a permuted NCHW batch joined with an expanded zero; and
  -- rows of 49 from a transposed view and a slice with a step
  for _, dt in ipairs(ALL) do
    local img = make({2, 3, 5, 7}, dt)
    local zero = make({1, 1, 1, 1}, dt)
    -- rows of 4, 8 and 16 (16 bytes for f32, for bf16 and f16, and for bool)
    for _, row in ipairs({4, 8, 16}) do
      same(kiln.cat({img:to(DEV):permute(1, 3, 4, 2), zero:to(DEV):expand({2, 5, 7, row - 3})}, 4),
        kiln.cat({img:permute(1, 3, 4, 2), zero:expand({2, 5, 7, row - 3})}, 4),
        "cat " .. dt .. " along the last dim: a permuted batch and an expanded value, rows of " .. row)
    end
    local long, tail = make({3, 40, 2}, dt), make({2, 3, 18}, dt)
    same(kiln.cat({long:to(DEV):transpose(2, 3):transpose(1, 2), tail:to(DEV):slice(3, 1, 18, 2)}, 3),
      kiln.cat({long:transpose(2, 3):transpose(1, 2), tail:slice(3, 1, 18, 2)}, 3),
      "cat " .. dt .. " along the last dim of strided views, rows of 49")
  end
  local z = kiln.zeros({0, 4}, {device = "cpu"})
  same(kiln.cat({list[1]:to(DEV), z:to(DEV), list[2]:to(DEV)}, 1), kiln.cat({list[1], z, list[2]}, 1),
    "cat with an empty input")
  for _, pair in ipairs({{"f32", "bf16"}, {"i32", "i64"}, {"bool", "i32"}, {"f16", "bf16"}, {"i64", "f64"}}) do
    local p, q = make({2, 3}, pair[1]), make({2, 2}, pair[2])
    same(kiln.cat({p:to(DEV), q:to(DEV)}, 2), kiln.cat({p, q}, 2), "cat " .. pair[1] .. " with " .. pair[2])
  end
end

---------------------------------------------------------------- index ops
do
  -- whole contiguous rows (embedding lookups): 16 bytes a thread where the
  -- rows allow ({.., 2, 24}: 48 elements), one element where not ({.., 3, 5})
  for _, dt in ipairs(ALL) do
    for _, shape in ipairs({{40, 2, 24}, {40, 3, 5}}) do
      local x = make(shape, dt)
      local idx = kiln.randint(1, 41, {33}, {seed = 5, dtype = "i64", device = "cpu"})
      local xc = x:to(DEV)
      same(xc:index_select(1, idx:to(DEV)), x:index_select(1, idx), "index_select rows " .. dt .. " " .. shape[3])
      local sidx = kiln.randint(1, 20, {25}, {seed = 6, dtype = "i32", device = "cpu"}) -- the view has 19 rows
      same(xc:slice(1, 3, 40, 2):index_select(1, sidx:to(DEV)), x:slice(1, 3, 40, 2):index_select(1, sidx),
        "index_select rows of a strided view " .. dt)
    end
  end
  for _, dt in ipairs(ALL) do
    for _, idt in ipairs({"i64", "i32"}) do
      local x = make({5, 6, 7}, dt)
      local tag = dt .. " idx " .. idt
      for _, v in ipairs(VIEWS) do
        local xv, xc = pair(x, v[2])
        for dim = 1, 3 do
          local n = xv:shape()[dim]
          local idx = kiln.randint(1, n + 1, {9}, {seed = dim, dtype = idt, device = "cpu"})
          same(xc:index_select(dim, idx:to(DEV)), xv:index_select(dim, idx),
            "index_select " .. tag .. " dim " .. dim .. v[1])
          local sidx, sidxc = pair(kiln.randint(1, n + 1, {12}, {seed = dim + 7, dtype = idt, device = "cpu"}),
            function(t) return t:slice(1, 1, 12, 3) end)
          same(xc:index_select(dim, sidxc), xv:index_select(dim, sidx),
            "index_select " .. tag .. " strided index dim " .. dim .. v[1])
          local gshape = xv:shape()
          gshape[dim] = 4
          local gidx = kiln.randint(1, n + 1, gshape, {seed = dim + 20, dtype = idt, device = "cpu"})
          same(xc:gather(dim, gidx:to(DEV)), xv:gather(dim, gidx), "gather " .. tag .. " dim " .. dim .. v[1])
          local tg, tgc = pair(gidx, function(t) return t:transpose(1, 3):contiguous():transpose(1, 3) end)
          same(xc:gather(dim, tgc), xv:gather(dim, tg), "gather " .. tag .. " strided index dim " .. dim .. v[1])
          -- index_add: unique indices give exact sums in every dtype; f32 also with repeats
          local perm = {}
          for i = 1, n do perm[i] = n + 1 - i end
          local uidx = kiln.tensor(perm, {dtype = idt, device = "cpu"})
          local sshape = xv:shape()
          local src = make(sshape, dt)
          same(xc:index_add(dim, uidx:to(DEV), src:to(DEV)), xv:index_add(dim, uidx, src),
            "index_add " .. tag .. " dim " .. dim .. v[1])
        end
      end
      local x2 = make({40, 8}, "f32")
      local idx = kiln.randint(1, 41, {300}, {seed = 5, dtype = idt, device = "cpu"})
      local src = make({300, 8}, "f32")
      same(x2:to(DEV):index_add(1, idx:to(DEV), src:to(DEV)), x2:index_add(1, idx, src),
        "index_add f32 with repeated indices (" .. idt .. ")", 1e-5, 1e-5)
      -- (atomics add the ~8 O(1) terms of a row in any order: f32 rounding
      -- differs by a few 1e-7 absolute, and a sum that cancels to ~1e-5 can
      -- then differ by percents relative, so the bound is absolute too)
    end
  end
  -- out-of-range indices: the CPU's error, and the session goes on
  local x = make({4, 2708}, "f32")
  local xc = x:to(DEV)
  local function err_of(fn)
    local okc, e = pcall(fn)
    return okc and "no error" or tostring(e):gsub("^[^:]*:%d+: ", "")
  end
  for _, bad in ipairs({5000, 0, -3}) do
    local idx = kiln.tensor({1, 2, bad, 7}, {dtype = "i64", device = "cpu"})
    local want = err_of(function() return x:index_select(2, idx) end)
    T.like(want, "out of range", "CPU index_select rejects index " .. bad)
    T.is(err_of(function() return xc:index_select(2, idx:to(DEV)) end), want,
      "CUDA index_select rejects index " .. bad .. " with the CPU's message")
    local src = make({4, 4}, "f32")
    want = err_of(function() return x:index_add(2, idx, src) end)
    T.is(err_of(function() return xc:index_add(2, idx:to(DEV), src:to(DEV)) end), want,
      "CUDA index_add rejects index " .. bad .. " with the CPU's message")
    local gidx = kiln.tensor({{1, 2}, {3, bad}}, {dtype = "i32", device = "cpu"})
    want = err_of(function() return x:gather(2, gidx) end)
    T.is(err_of(function() return xc:gather(2, gidx:to(DEV)) end), want,
      "CUDA gather rejects index " .. bad .. " with the CPU's message")
  end
  local good = kiln.tensor({2, 1}, {dtype = "i64", device = "cpu"})
  same(xc:index_select(1, good:to(DEV)), x:index_select(1, good), "index_select works after an error")
  same(xc:sum(), x:sum(), "the session goes on after index errors", 1e-6)
end

---------------------------------------------------------------- random
do
  for _, dt in ipairs(FLOATS) do
    for _, shape in ipairs({{5, 7}, {1000}, {3, 1, 33}}) do
      local o = {seed = 42, dtype = dt}
      local function on(dev) return {seed = o.seed, dtype = o.dtype, device = dev} end
      same(kiln.randn(shape, on(DEV)), kiln.randn(shape, on("cpu")), "randn " .. dt .. " bit-exact")
      same(kiln.rand(shape, on(DEV)), kiln.rand(shape, on("cpu")), "rand " .. dt .. " bit-exact")
      local ro = {seed = 9, dtype = dt, low = -2.5, high = 4}
      local rc = {seed = 9, dtype = dt, low = -2.5, high = 4, device = DEV}
      ro.device = "cpu"
      same(kiln.rand(shape, rc), kiln.rand(shape, ro), "rand low/high " .. dt .. " bit-exact")
    end
  end
  for _, dt in ipairs({"i64", "i32", "f32", "bool", "bf16"}) do
    same(kiln.randint(-5, 17, {999}, {seed = 7, dtype = dt, device = DEV}),
      kiln.randint(-5, 17, {999}, {seed = 7, dtype = dt, device = "cpu"}), "randint " .. dt .. " bit-exact")
  end
  -- the global stream: a second draw starts at a counter offset
  kiln.manual_seed(1234)
  local c1, c2 = kiln.randn({17}, {device = DEV}), kiln.randn({5, 3}, {device = DEV})
  kiln.manual_seed(1234)
  local r1, r2 = kiln.randn({17}, {device = "cpu"}), kiln.randn({5, 3}, {device = "cpu"})
  same(c1, r1, "randn from the global stream")
  same(c2, r2, "randn from the global stream at an offset")
end

---------------------------------------------------------------- copies and casts
do
  for _, src in ipairs(ALL) do
    local x = make({4, 1, 6}, src, -300, 300)
    if not INTS[src] then x = (x * 1000):to(src):masked_fill(x:gt(1.5), 0 / 0) end
    local xv, xc = pair(x, function(t) return t:transpose(1, 3) end)
    same(xc:contiguous(), xv:contiguous(), "contiguous " .. src .. " of a transposed view")
    for _, dst in ipairs(ALL) do
      same(xc:to(dst), xv:to(dst), "cast " .. src .. " -> " .. dst .. " of a transposed view")
    end
  end
end

------------------------------------- generated kernels: vectors and row layouts
-- Compiled pointwise and row kernels (the renderer's vector loads, rows in
-- registers, a block per row) on awkward sizes against the same function
-- evaluated in f64 on the CPU: an inner dim a multiple of every vector
-- width and one of none, inputs that are views at an element offset of 1
-- (misaligned for vectors: the scalar loop), rows of 1 to 100000 elements.
-- Inputs are f64 CPU values rounded to dt first, so both sides see the same
-- numbers; NaN never passes.
do
  local function within(got, want, rtol, atol)
    local g = got:to("cpu"):to("f64")
    if shape_str(g) ~= shape_str(want) then return math.huge end
    local excess = ((g - want):abs() - want:abs() * rtol - atol):amax():item()
    return excess == excess and excess or math.huge
  end
  -- x of shape sh and dtype dt on the GPU, at an element offset `off` of its storage
  local function input(sh, dt, off)
    local n = 1
    for _, d in ipairs(sh) do n = n * d end
    local base = make({n + off}, "f32"):to(dt):to(DEV)
    return base:slice(1, 1 + off, n + off):view(sh)
  end
  local function check(name, f, args, dt, rtol, atol)
    local cm = kiln.compile(f)
    local got = cm(table.unpack(args))
    local ref = {}
    for i, a in ipairs(args) do ref[i] = a:to("cpu"):to("f64") end
    local e = within(got, f(table.unpack(ref)), rtol, atol)
    T.ok(e <= 0, string.format("%s %s: compiled on the GPU within tolerance of f64 (excess %.3g)", name, dt, e))
  end
  for _, dt in ipairs({ "f32", "bf16", "f16", "f64" }) do
    local rt = rtol_of(dt) == 1e-6 and 1e-5 or 2e-2
    for _, cols in ipairs({ 1000, 1001 }) do
      for _, off in ipairs({ 0, 1 }) do
        local x, b = input({ 33, cols }, dt, off), input({ cols }, dt, 0)
        check(string.format("gelu(x + bias) 33x%d offset %d", cols, off), function(x, b) return (x + b):gelu() end,
          { x, b }, dt, rt, rt)
      end
    end
  end
  for _, dt in ipairs({ "f32", "bf16" }) do
    local half = dt == "bf16"
    for _, n in ipairs({ 1, 7, 256, 1000, 1001, 4096, 100000 }) do
      local rows = n > 4096 and 5 or 37
      for _, off in ipairs(n == 256 and { 0, 1 } or { 0 }) do
        local x, r = input({ rows, n }, dt, off), input({ rows, n }, dt, 0)
        local what = string.format("rows of %d offset %d", n, off)
        -- scaled eagerly first: x * 3 inside the function would be rounded
        -- to bf16 (each op's result in its dtype), which the f64 reference
        -- does not do
        check("softmax " .. what, function(x3) return kiln.softmax(x3, -1) end, { x * 3 }, dt,
          half and 2e-2 or 1e-4, 1e-9)
        check("log_softmax " .. what, function(x) return kiln.log_softmax(x, -1) end, { x }, dt,
          half and 2e-2 or 1e-4, half and 5e-2 or 1e-4)
        check("layer_norm(x + r) " .. what, function(x, r) return kiln.layer_norm(x + r, { n }) end, { x, r }, dt,
          half and 2e-2 or 1e-4, half and 5e-2 or 1e-4)
        check("row sum " .. what, function(x) return (x * 2):sum(-1) end, { x }, dt,
          half and 2e-2 or 1e-4, half and 0.5 or 1e-3)
      end
    end
  end
  -- Layer norm on rows that break a careless variance: a first element
  -- that is an outlier (22 standard deviations out: a sum shifted by it
  -- would cancel), a constant row (variance 0), rows far from zero
  -- (offset 100), and rows shorter than a warp's lanes; with and without
  -- weight and bias.
  for _, dt in ipairs({ "f32", "bf16", "f16" }) do
    local half = dt ~= "f32"
    for _, n in ipairs({ 512, 24, 2048 }) do
      local rows, vals = 6, {}
      local noise = make({ rows * n }, "f32"):tolist()
      for i = 1, rows do
        local row = {}
        for j = 1, n do
          local v = noise[(i - 1) * n + j]
          if i <= 2 and j == 1 then v = (i == 1 and 1000 or -300) end
          if i == 3 then v = 5 end
          if i >= 4 then v = v + 100 * (i == 4 and 1 or -1) end
          row[j] = v
        end
        vals[i] = row
      end
      local x = kiln.tensor(vals):to(dt):to(DEV)
      local w, b = input({ n }, dt, 0), input({ n }, dt, 0)
      local what = string.format("rows of %d: outlier first, constant, offset 100", n)
      check("layer_norm " .. what, function(x) return kiln.layer_norm(x, { n }) end, { x }, dt,
        half and 2e-2 or 1e-4, half and 5e-2 or 1e-4)
      check("layer_norm with weight and bias " .. what, function(x, w, b) return kiln.layer_norm(x, { n }, w, b) end,
        { x, w, b }, dt, half and 2e-2 or 1e-4, half and 5e-2 or 1e-4)
    end
  end
end

T.done()
