-- binding.lua: the Lua face of tensors: creation, properties, 1-based dims,
-- views that share storage, slicing, split/cat, metamethods with numbers,
-- the argument forms of conv and pools, and conversions. Values are checked
-- against hand-computed results.
local T = dofile("t/lib/tap.lua")

local function same(a, b, tol)
  tol = tol or 1e-6
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then
    if type(a) == "number" then return a == a and b == b and math.abs(a - b) <= tol end
    return a == b
  end
  if #a ~= #b then return false end
  for i = 1, #a do if not same(a[i], b[i], tol) then return false end end
  return true
end
local function is_list(got, want, name, tol)
  local function show(v)
    if type(v) ~= "table" then return tostring(v) end
    local p = {}
    for i = 1, #v do p[i] = show(v[i]) end
    return "{" .. table.concat(p, ",") .. "}"
  end
  return T.ok(same(got, want, tol), name .. (same(got, want, tol) and "" or
    ("  got " .. show(got) .. " want " .. show(want))))
end

-- creation and properties
local m = kiln.tensor{{1, 2, 3}, {4, 5, 6}}
is_list(m:shape(), {2, 3}, "tensor{} shape")
T.is(m.dtype, "f32", "default dtype f32")
T.is(m.device, kiln.default_device(), "made on the default device (cpu without a GPU backend)")
T.is(m:dim(), 2, "dim()")
T.is(m:numel(), 6, "numel()")
T.is(m:size(-1), 3, "size(-1)")
is_list(kiln.zeros({2, 2}):tolist(), {{0, 0}, {0, 0}}, "zeros")
is_list(kiln.ones(3):tolist(), {1, 1, 1}, "ones with a number shape")
is_list(kiln.full({2}, 7.5):tolist(), {7.5, 7.5}, "full")
is_list(kiln.arange(4):tolist(), {0, 1, 2, 3}, "arange(n) counts from 0")
is_list(kiln.arange(1, 2, 0.25):tolist(), {1, 1.25, 1.5, 1.75}, "arange with a float step")
T.is(kiln.arange(3).dtype, "i64", "integer arange is i64")
T.is(kiln.tensor(2.5):item(), 2.5, "0-dim tensor and item()")
T.is(kiln.tensor{true, false}.dtype, "f32", "tensor of booleans without dtype converts")
T.is(kiln.tensor({1, 0}, {dtype = "bool"}):tolist()[1], true, "bool dtype gives Lua booleans")
T.is(kiln.tensor({3}, {dtype = "i64"}):item(), 3, "i64 item is an integer")
T.ok(math.type(kiln.tensor({3}, {dtype = "i64"}):item()) == "integer", "math.type integer")

-- seeded randomness
local r1 = kiln.randn({4}, {seed = 42}):tolist()
local r2 = kiln.randn({4}, {seed = 42}):tolist()
is_list(r1, r2, "randn with a seed is reproducible")
kiln.manual_seed(5); local s1 = kiln.rand({3}):tolist()
kiln.manual_seed(5); local s2 = kiln.rand({3}):tolist()
is_list(s1, s2, "manual_seed restarts the global stream")
local ri = kiln.randint(0, 3, {1000}, {seed = 1})
T.ok(ri:amin():item() >= 0 and ri:amax():item() <= 2, "randint within [low, high)")
local ru = kiln.rand({1000}, {seed = 2, low = 5, high = 6})
T.ok(ru:amin():item() >= 5 and ru:amax():item() < 6, "rand with low/high")

-- dims are 1-based
is_list(m:sum(1):tolist(), {5, 7, 9}, "sum(1) reduces the first dim")
is_list(m:sum(2):tolist(), {6, 15}, "sum(2) reduces the second dim")
is_list(m:sum(-1):tolist(), {6, 15}, "sum(-1) is the last dim")
is_list(m:sum({1, 2}):shape(), {}, "sum over a table of dims")
is_list(m:sum(2, true):shape(), {2, 1}, "keepdim")
is_list(m:mean(1, {keepdim = true}):tolist(), {{2.5, 3.5, 4.5}}, "mean with an options table")
T.near(m:var():item(), 3.5, 1e-6, "var unbiased")
T.near(m:var(nil, {correction = 0}):item(), 35 / 12, 1e-6, "var with correction 0")
local v, i = m:max(2)
is_list(v:tolist(), {3, 6}, "max(dim) values")
is_list(i:tolist(), {3, 3}, "max(dim) indices are 1-based")
T.is(m:max():item(), 6, "max() of everything")
is_list(m:max(kiln.full({3}, 4)):tolist(), {{4, 4, 4}, {4, 5, 6}}, "max(tensor) is elementwise")
is_list(m:softmax(1):sum(1):tolist(), {1, 1, 1}, "softmax over dim 1 sums to 1", 1e-6)

-- views share storage; slices are 1-based inclusive
local base = kiln.arange(12, {dtype = "f32"}):reshape({3, 4})
local tr = base:transpose(1, 2)
is_list(tr:shape(), {4, 3}, "transpose shape")
T.ok(not tr:is_contiguous(), "transpose is a view, not contiguous")
is_list(tr:strides(), {1, 4}, "transpose swaps strides (no copy)")
is_list(base:t():contiguous():tolist()[2], {1, 5, 9}, "contiguous of a transpose")
is_list(base:slice(2, 2, 3):tolist(), {{1, 2}, {5, 6}, {9, 10}}, "slice(dim, 2, 3) is inclusive")
is_list(base:slice(1, -1):tolist(), {{8, 9, 10, 11}}, "slice from -1 is the last row")
is_list(base:slice(2, 1, -1, 2):tolist(), {{0, 2}, {4, 6}, {8, 10}}, "slice with a step")
is_list(base:slice(2, 2, 3):strides(), {4, 1}, "a slice keeps the strides")
is_list(base:permute(2, 1):shape(), {4, 3}, "permute")
is_list(base:view(2, 6):shape(), {2, 6}, "view with numbers")
is_list(base:reshape({-1}):shape(), {12}, "reshape with -1")
is_list(tr:reshape({12}):tolist()[2], 4, "reshape of a transpose copies in logical order")
T.raises(function() return tr:view({12}) end, "view: the strides", "view refuses what strides cannot express")
is_list(base:unsqueeze(1):shape(), {1, 3, 4}, "unsqueeze(1)")
is_list(base:unsqueeze(1):squeeze():shape(), {3, 4}, "squeeze()")
is_list(base:flatten():shape(), {12}, "flatten()")
is_list(kiln.ones({3, 1}):expand({3, 4}):strides(), {1, 0}, "expand gives stride 0")
local a, b, c = base:split(2, 2)
is_list({a:shape(), b:shape()}, {{3, 2}, {3, 2}}, "split into equal pieces")
T.is(c, nil, "split returns exactly the pieces")
local p, q = base:split({1, 3}, 2)
is_list(q:tolist()[1], {1, 2, 3}, "split with sizes")
local pieces = {}
for k = 1, 11 do pieces[k] = kiln.full({1, 2}, k) end
local cat = kiln.cat(pieces, 1)
is_list(cat:shape(), {11, 2}, "cat of more tensors than one op call takes")
is_list(cat:tolist()[11], {11, 11}, "cat keeps the order")
is_list(kiln.cat({base, base}, -1):shape(), {3, 8}, "cat along -1")

-- metamethods with numbers on either side
is_list((2 * m - 1):tolist()[1], {1, 3, 5}, "number * tensor - number")
is_list((1 / kiln.tensor{2, 4}):tolist(), {0.5, 0.25}, "number / tensor")
is_list((kiln.tensor{2, 3} ^ 2):tolist(), {4, 9}, "tensor ^ number")
is_list((-kiln.tensor{1, -2}):tolist(), {-1, 2}, "unary minus")
is_list((m + kiln.tensor{10, 20, 30}):tolist()[2], {14, 25, 36}, "broadcast a row")
is_list((m + kiln.tensor{{100}, {200}}):tolist()[2], {204, 205, 206}, "broadcast a column")
T.is((kiln.tensor{1, 2}:cast("i32") + 1).dtype, "i32", "int tensor + integer stays int")
T.is((kiln.tensor{1, 2}:cast("i32") + 0.5).dtype, "f32", "int tensor + float becomes f32")
T.ok(kiln.tensor(1) < kiln.tensor(2), "< on one-element tensors gives a boolean")
T.ok(kiln.tensor(2) <= 2, "<= with a number")
is_list(m:gt(3):tolist()[1], {false, false, false}, "gt gives a bool tensor")
is_list(kiln.where(m:gt(3), m, 0):tolist()[2], {4, 5, 6}, "where with a number")
is_list(m:masked_fill(m:lt(3), -1):tolist()[1], {-1, -1, 3}, "masked_fill")
is_list(kiln.ones({3, 3}):tril():tolist()[1], {1, 0, 0}, "tril")
is_list(kiln.ones({3, 3}):triu(1):tolist()[1], {0, 1, 1}, "triu(1)")
is_list(kiln.tensor{-1, 2}:relu():tolist(), {0, 2}, "relu")
T.near(kiln.tensor(1):gelu():item(), 0.8413447460685429, 1e-6, "gelu is the erf form")
is_list(kiln.tensor{1, 4}:sqrt():tolist(), {1, 2}, "sqrt")
is_list(kiln.tensor{{1, 2}, {3, 4}}:matmul(kiln.tensor{{5}, {6}}):tolist(), {{17}, {39}}, "matmul")

-- indices are 1-based
local src = kiln.tensor{{1, 2}, {3, 4}, {5, 6}}
local idx = kiln.tensor({3, 1}, {dtype = "i64"})
is_list(src:index_select(1, idx):tolist(), {{5, 6}, {1, 2}}, "index_select with 1-based indices")
is_list(src:gather(2, kiln.tensor({{2}, {1}, {2}}, {dtype = "i64"})):tolist(), {{2}, {3}, {6}}, "gather")
is_list(kiln.zeros({3, 2}):index_add(1, idx, kiln.ones({2, 2})):tolist(), {{1, 1}, {0, 0}, {1, 1}},
  "index_add")
T.raises(function() return src:index_select(1, kiln.tensor({0}, {dtype = "i64"})) end, "index",
  "index 0 is out of range")

-- conv and pool argument forms
local img = kiln.randn({1, 2, 8, 8}, {seed = 3})
is_list(img:max_pool2d(2):shape(), {1, 2, 4, 4}, "max_pool2d(k): stride defaults to k")
is_list(img:max_pool2d(3, 2, 1):shape(), {1, 2, 4, 4}, "max_pool2d(k, stride, padding)")
is_list(img:avg_pool2d(3, {stride = 2, padding = 1, ceil_mode = true}):shape(), {1, 2, 5, 5},
  "avg_pool2d with options and ceil_mode")
is_list(img:adaptive_avg_pool2d(1):shape(), {1, 2, 1, 1}, "adaptive_avg_pool2d(1)")
is_list(kiln.conv2d(img, kiln.randn({4, 2, 3, 3}), nil, {stride = 2, padding = 1}):shape(), {1, 4, 4, 4},
  "conv2d with an options table")
is_list(kiln.conv2d(img, kiln.randn({4, 1, 3, 3}), nil, 1, 1, 2, 2):shape(), {1, 4, 6, 6},
  "conv2d with positional stride, padding, dilation, groups")
local ones = kiln.ones({1, 1, 3, 3})
is_list(kiln.conv2d(ones, ones, kiln.tensor{1}):tolist(), {{{{10}}}}, "conv2d with bias, by hand")
local ln = kiln.tensor{{1, 2, 3}}:layer_norm(3)
T.near(ln:tolist()[1][1], -1.2247356859, 1e-5, "layer_norm with a number shape")
local bn = kiln.batch_norm(kiln.full({1, 2, 1, 1}, 3), kiln.tensor{1, 1}, kiln.tensor{4, 4})
T.near(bn:tolist()[1][1][1][1], 2 / math.sqrt(4 + 1e-5), 1e-6, "batch_norm inference form")

-- conversions and printing
T.is(m:to("bf16").dtype, "bf16", "to(dtype)")
T.is(m:to({dtype = "f16"}).dtype, "f16", "to{dtype=}")
is_list(m:to(m.device):tolist(), m:tolist(), "to(the same device) keeps the values")
is_list(kiln.tensor{1.5, 2.5}:to("i64"):tolist(), {1, 2}, "float to int truncates")
T.like(tostring(m), "^tensor%({{1%.0000, 2%.0000, 3%.0000},", "tostring shows values")
T.like(tostring(m), "shape={2,3}, dtype=f32, device=" .. m.device .. "%)$", "tostring shows shape, dtype and device")
T.like(tostring(kiln.zeros({100, 100})), "%.%.%.", "big tensors are summarized")
T.like(tostring(kiln.full({2}, 1e-7)), "e%-07", "tiny values in scientific notation")
T.raises(function() return m:to("tpu") end, "neither a device", "unknown to() target")
T.done()
