-- fuzz_lua_api.lua: issue 14's Lua-API fuzzer. Random calls to every public
-- kiln function, tensor method, compiled-callable method and kiln.nn
-- constructor, with hostile arguments: wrong types; huge, negative, NaN and
-- infinite numbers; 2^53 and 2^63; tables whose __len, __index or __eq lie
-- or raise; tables with holes; strings with NUL bytes and bad UTF-8; up to
-- 250 arguments with nils among them; tensors of every dtype, 0-d,
-- zero-size and strided; eagerly and inside kiln.compile.
--
-- Every call must return or raise a Lua error whose message is a string,
-- shows no address (table: 0x...), and is not an unchecked slip inside
-- kiln's own Lua ("attempt to index a nil value"). A crash, abort,
-- sanitizer report or hang fails the test.
--
-- The calls run in a child kiln process (in a scratch folder, with its own
-- cache dir and a memory cap), so a crash or hang is seen and reported
-- with the seed and the call that caused it. Each call draws from its own
-- stream (seed, call index), so one call can be rerun:
--   KILN_FUZZ_SEED=S KILN_FUZZ_FROM=I KILN_FUZZ_CALLS=1 prove ... t/fuzz_lua_api.lua
-- KILN_FUZZ_SEED fixes the seed (CI); without it each run draws a new one.
-- KILN_FUZZ_CALLS (default 4000) and KILN_FUZZ_SECONDS (default 40) bound
-- the run; whichever comes first ends it.

local worker = os.getenv("KILN_FUZZ_WORKER") == "1"

---------------------------------------------------------------------------
-- The parent: starts the worker, reads its report, judges.
if not worker then
  local T = dofile("t/lib/tap.lua")
  local seed = tonumber(os.getenv("KILN_FUZZ_SEED") or "") or (os.time() * 1000 + math.floor(os.clock() * 1e6)) % 2^31
  local calls = tonumber(os.getenv("KILN_FUZZ_CALLS") or "") or 4000
  local from = tonumber(os.getenv("KILN_FUZZ_FROM") or "") or 1
  local seconds = tonumber(os.getenv("KILN_FUZZ_SECONDS") or "") or 40
  io.write(string.format("# fuzz_lua_api: seed %d, calls %d..%d, at most %gs\n", seed, from, from + calls - 1, seconds))
  local sh = function(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
  local pipe = io.popen("pwd")
  local root = pipe:read("l")
  pipe:close()
  local kiln_prog = os.getenv("KILN") or "build/kiln"
  if kiln_prog:sub(1, 1) ~= "/" then kiln_prog = root .. "/" .. kiln_prog end
  local scratch = os.tmpname()
  os.remove(scratch)
  assert(os.execute("mkdir -p " .. sh(scratch .. "/cache")))
  -- a memory cap, so that a legitimate request for 16 GB does not take the
  -- shared machine down: ulimit on the normal build, ASan's own allocation
  -- limit on the sanitizer build (its shadow memory needs the address space)
  local asan = os.getenv("ASAN_OPTIONS") or ((os.getenv("KILN_BUILD") or ""):find("asan") and "")
  local limit = asan and ("ASAN_OPTIONS=" .. sh(asan .. (asan ~= "" and ":" or "") ..
                          "max_allocation_size_mb=2048:allocator_may_return_null=1") .. " ")
                      or "ulimit -v 6000000; "
  local cmd = string.format("cd %s && %sKILN_FUZZ_WORKER=1 KILN_DEVICE=cpu KILN_CACHE_DIR=%s KILN_FUZZ_SEED=%d " ..
    "KILN_FUZZ_FROM=%d KILN_FUZZ_CALLS=%d KILN_FUZZ_SECONDS=%g timeout -s KILL %d %s %s 2>&1",
    sh(scratch), limit, sh(scratch .. "/cache"), seed, from, calls, seconds, math.floor(seconds * 2 + 60),
    sh(kiln_prog), sh(root .. "/t/fuzz_lua_api.lua"))
  pipe = io.popen(cmd)
  local last, done, bad, tail = nil, nil, {}, {}
  for line in pipe:lines() do
    local call = line:match("^##call (.*)")
    if call then last = call
    elseif line:match("^##done ") then done = line:sub(8)
    elseif line:match("^##bad ") then bad[#bad + 1] = line:sub(7)
    else
      tail[#tail + 1] = line
      if #tail > 30 then table.remove(tail, 1) end
    end
  end
  local _, how, code = pipe:close()
  os.execute("rm -rf " .. sh(scratch))
  local finished = how == "exit" and code == 0 and done ~= nil
  T.ok(finished, string.format("the worker ran to its end (seed %d)", seed))
  if not finished then
    io.write(string.format("# it ended by %s %s during call: %s\n", tostring(how), tostring(code), tostring(last)))
    io.write(string.format("# rerun it: KILN_FUZZ_SEED=%d KILN_FUZZ_FROM=%s KILN_FUZZ_CALLS=1\n", seed,
      last and last:match("^(%d+)") or "?"))
    for _, l in ipairs(tail) do io.write("#   " .. l .. "\n") end
  else
    io.write("# " .. done .. "\n")
  end
  T.is(#bad, 0, "every call returned or raised a clear message (seed " .. seed .. ")")
  for i = 1, math.min(#bad, 20) do io.write("# " .. bad[i] .. "\n") end
  T.done()
  return
end

---------------------------------------------------------------------------
-- The worker.
local seed = math.tointeger(tonumber(os.getenv("KILN_FUZZ_SEED")))
local first = math.tointeger(tonumber(os.getenv("KILN_FUZZ_FROM")))
local n_calls = math.tointeger(tonumber(os.getenv("KILN_FUZZ_CALLS")))
local seconds = tonumber(os.getenv("KILN_FUZZ_SECONDS"))
local rnd = math.random
local function pick(list) return list[rnd(#list)] end
local real_print = print
print = function() end -- kiln.explain, :commands and modules print a lot
local out = io.stdout
local now = kiln.clock -- wall seconds: compiling happens in child processes

-- values: each generator returns the value and how to write it
local MARK = "FUZZ_RAISED" -- errors the hostile arguments raise themselves
local dtypes = {"f32", "f64", "bf16", "f16", "i32", "i64", "bool"}
local numbers = {
  {0, "0"}, {1, "1"}, {2, "2"}, {3, "3"}, {-1, "-1"}, {-2, "-2"}, {0.5, "0.5"}, {-0.0, "-0.0"},
  {2^53, "2^53"}, {2^53 + 2, "2^53+2"}, {2^63, "2^63"}, {-2^63, "-2^63"}, {math.maxinteger, "maxinteger"},
  {math.mininteger, "mininteger"}, {1 << 62, "1<<62"}, {2^31, "2^31"}, {2^32 + 2, "2^32+2"},
  {1 << 40, "1<<40"}, {1e300, "1e300"}, {-1e300, "-1e300"}, {0/0, "nan"}, {1/0, "inf"}, {-1/0, "-inf"},
  {4.9e-324, "4.9e-324"}, {2.5, "2.5"}, {65504, "65504"}, {-65505, "-65505"}, {255, "255"},
}
local strings = {
  "", "f32", "f64", "bf16", "f16", "i32", "i64", "bool", "cpu", "cpu:1", "cuda", "cuda:7", "a\0b", "\255\254",
  "\195", "\237\160\128", string.rep("x", 5000), "%s%n%d", "sum", "mean", "svg", "dot", "captured", "fused",
  "TB", "max-autotune", "reduce-overhead", "default", "eager", "x", "weight", "0/0", "f32\0", "-1", "1e999",
  "../../../../tmp", "nul\0path.safetensors", "dir/", "nan",
}

local gen -- forward: any value

local function num_value()
  local v = pick(numbers)
  return v[1], v[2]
end

local function str_value()
  local s = pick(strings)
  return s, string.format("%q", #s > 40 and (s:sub(1, 20) .. "..." .. #s) or s):gsub("\n", "n")
end

local shapes = {{}, {0}, {1}, {2}, {3}, {2, 3}, {1, 2, 3}, {0, 3}, {3, 0, 2}, {2, 2, 2, 2}, {1, 1}, {4, 1}}

local function tensor_value()
  local dt = pick(dtypes)
  local shape = pick(shapes)
  local shape_s = "{" .. table.concat(shape, ",") .. "}"
  local ok, t = pcall(function()
    local base = kiln.randn(shape, {seed = rnd(1000)}) * pick({1, 100, 1e5, 1e-3})
    if rnd(8) == 1 then base = base * (0/0) end
    return base:to(dt)
  end)
  if not ok then return kiln.zeros({2}), "tensor(f32,{2})" end
  local how = rnd(6)
  if how == 1 and t:dim() >= 2 then return t:transpose(1, 2), "tensor(" .. dt .. "," .. shape_s .. "):transpose(1,2)" end
  if how == 2 and t:dim() >= 1 then
    local okv, v = pcall(t.slice, t, 1, 1, -1, 2)
    if okv then return v, "tensor(" .. dt .. "," .. shape_s .. "):slice(1,1,-1,2)" end
  end
  if how == 3 and #shape == 0 then return t:expand({3}), "tensor(" .. dt .. ",{}):expand{3}" end
  return t, "tensor(" .. dt .. "," .. shape_s .. ")"
end

local function liar(field, v, vdesc)
  return setmetatable({1, 2}, {[field] = v}), "table{" .. field .. "=" .. vdesc .. "}"
end

local function table_value(depth)
  local k = rnd(16)
  if k == 1 then return {}, "{}" end
  if k == 2 then return {1, nil, 3}, "{1,nil,3}" end
  if k == 3 then return {[1] = 1, [3] = 3, [-1] = 2, [0.5] = 1}, "{holes}" end
  if k == 4 then
    local l = pick({-1, 1 << 40, math.mininteger, 0/0, 2.5, 300, "3", 0})
    return liar("__len", function() return l end, "->" .. tostring(l))
  end
  if k == 5 then return liar("__len", function() error(MARK .. " __len") end, "raises") end
  if k == 6 then
    local v, d = gen(depth + 1)
    return setmetatable({}, {__len = function() return 3 end, __index = function() return v end}), "table{__len=3,__index->" .. d .. "}"
  end
  if k == 7 then return liar("__index", function() error(MARK .. " __index") end, "raises") end
  if k == 8 then
    return setmetatable({}, {__eq = function() return true end, __lt = function() error(MARK .. " __lt") end,
                             __tostring = function() return {} end}), "table{__eq,__lt raises,__tostring->table}"
  end
  if k == 9 then
    local t = {}
    local n = rnd(6)
    for i = 1, n do t[i] = (gen(depth + 1)) end
    return t, "{" .. n .. " random}"
  end
  if k == 10 then
    local keys = {"dtype", "device", "seed", "groups", "stride", "padding", "dilation", "keepdim", "correction",
                  "dim", "mode", "dynamic", "budget_s", "eps", "bias", "view", "format", "rankdir", "collapse",
                  "requires", "n", "warmup", "fullgraph", "name", "step", "inplace", "p", "base", "strict"}
    local t, parts = {}, {}
    for _ = 1, rnd(3) do
      local key = pick(keys)
      local v, d = gen(depth + 1)
      t[key] = v
      parts[#parts + 1] = key .. "=" .. d
    end
    return t, "{" .. table.concat(parts, ",") .. "}"
  end
  if k == 11 then
    local t = {}
    for i = 1, rnd(4) do t[i] = pick({0, 1, 2, 3, -1}) end
    return t, "{" .. table.concat(t, ",") .. "}"
  end
  if k == 12 then
    local t = {}
    t[1] = t
    return t, "{self}"
  end
  if k == 13 then
    local t = {}
    for i = 1, rnd(3) do t[i] = (tensor_value()) end
    return t, "{" .. #t .. " tensors}"
  end
  if k == 14 then
    local deep = 1
    for _ = 1, 60 do deep = {deep} end
    return deep, "{60 deep}"
  end
  if k == 15 then
    local x = pick({{dtype = pick(dtypes)}, {seed = 1}, {dim = -1}, {keepdim = true}})
    return x, "{option}"
  end
  local t = {}
  for i = 1, 3 do t[i] = (num_value()) end
  return t, "{3 numbers}"
end

local specials
local function special_value()
  if not specials then
    specials = {
      {function() end, "function"},
      {function(...) return ... end, "identity function"},
      {function() error(MARK .. " function") end, "raising function"},
      {function() return kiln.zeros({2}) end, "function->tensor"},
      {io.stdout, "io.stdout"},
      {coroutine.create(function() end), "coroutine"},
    }
    local okc, cm = pcall(kiln.compile, function(x) return (x + 1) * 2 end)
    if okc then specials[#specials + 1] = {cm, "compiled(x+1)*2"} end
    local okm, lin = pcall(kiln.nn.Linear, 3, 2)
    if okm then specials[#specials + 1] = {lin, "nn.Linear(3,2)"} end
  end
  local s = pick(specials)
  return s[1], s[2]
end

gen = function(depth)
  depth = depth or 0
  local k = rnd(depth > 2 and 7 or 10)
  if k <= 2 then return num_value() end
  if k == 3 then return str_value() end
  if k <= 5 then return tensor_value() end
  if k == 6 then return rnd(2) == 1, "bool" end
  if k == 7 then return nil, "nil" end
  if k == 8 then return special_value() end
  return table_value(depth)
end

-- targets: name -> function(args...) doing the call
local targets = {}
local skip = {cmd = true, repl = true, session = true, exit = true, quit = true}
for name, v in pairs(kiln) do
  if type(v) == "function" and not skip[name] then targets[#targets + 1] = {"kiln." .. name, v} end
end
for _, sub in ipairs({"autotune", "viz", "profiler", "nn"}) do
  for name, v in pairs(kiln[sub] or {}) do
    if type(v) == "function" then targets[#targets + 1] = {"kiln." .. sub .. "." .. name, v} end
  end
end
local tensor_methods = {}
for name, v in pairs(kiln.Tensor) do
  if type(v) == "function" then tensor_methods[#tensor_methods + 1] = name; targets[#targets + 1] = {"Tensor:" .. name, v, true} end
end
local tmeta = getmetatable(kiln.zeros({1}))
for _, mm in ipairs({"__add", "__sub", "__mul", "__div", "__pow", "__unm", "__lt", "__le", "__index", "__tostring"}) do
  if tmeta[mm] then targets[#targets + 1] = {"Tensor." .. mm, tmeta[mm], true} end
end
local cm_index = getmetatable(kiln.compile(function(x) return x end)).__index
for name, v in pairs(type(cm_index) == "table" and cm_index or {}) do
  if type(v) == "function" then targets[#targets + 1] = {"Compiled:" .. name, v, "compiled"} end
end
targets[#targets + 1] = {"config[k]=v", function(k, v) kiln.config[k] = v end}
targets[#targets + 1] = {"Compiled()", function(...) local cm = kiln.compile(function(...) return ... end); return cm(...) end}
table.sort(targets, function(a, b) return a[1] < b[1] end)

local function is_bad_message(e)
  -- kiln's usage errors are objects whose tostring is the message (the REPL
  -- prints them without a traceback)
  local mt = getmetatable(e)
  if type(e) == "table" and type(mt) == "table" and mt.__name == "kiln.UsageError" then e = tostring(e) end
  if type(e) ~= "string" then return "the error is a " .. type(e) .. ", not a message" end
  if e:find(MARK, 1, true) or e:find("FUZZ_BUDGET", 1, true) then return nil end
  if #e == 0 then return "an empty message" end
  if e:find("0x%x%x%x%x%x") then return "an address in the message" end
  -- an unchecked argument reaching kiln's own Lua code: a slip, not a message
  -- (the fuzzer's own functions, called by kiln with other arguments, may slip)
  if e:find("attempt to ") and not e:find("fuzz_lua_api.lua:", 1, true) then return "an unchecked value inside kiln" end
  return nil
end

local function budget_hook()
  -- count hook: stops Lua code (kiln's or a hostile metamethod's) that runs too long
  if now() > _G.FUZZ_DEADLINE then error("FUZZ_BUDGET: over the per-call budget", 2) end
end

local start = now()
local done, errors, compiled_calls = 0, 0, 0
for i = first, first + n_calls - 1 do
  if now() - start > seconds then break end
  math.randomseed(seed, i)
  local target = pick(targets)
  local args, descs = {}, {}
  local n = rnd(12) == 1 and rnd(250) or rnd(0, 4)
  local tail = 0
  if target[3] == true then
    local self, d
    if rnd(6) == 1 then self, d = gen() else self, d = tensor_value() end
    args[1], descs[1], tail = self, d, 1
  elseif target[3] == "compiled" then
    local self, d = special_value()
    args[1], descs[1], tail = self, d, 1
  end
  for j = 1, n do
    local v, d = gen()
    args[tail + j], descs[tail + j] = v, d
  end
  local nargs = tail + n
  local inside = rnd(4) == 1
  local desc = string.format("%d %s%s(%s)", i, inside and "inside kiln.compile: " or "", target[1],
    nargs > 12 and (table.concat(descs, ", ", 1, 12) .. ", ... " .. nargs .. " arguments") or table.concat(descs, ", ", 1, nargs))
  out:write("##call ", desc, "\n")
  out:flush()
  _G.FUZZ_DEADLINE = now() + 5
  debug.sethook(budget_hook, "", 1000)
  local fn = target[2]
  local ok, err
  if inside then
    compiled_calls = compiled_calls + 1
    ok, err = pcall(function()
      local cf = kiln.compile(function(...) return fn(...) end)
      return cf(table.unpack(args, 1, nargs))
    end)
  else
    ok, err = pcall(fn, table.unpack(args, 1, nargs))
  end
  debug.sethook()
  if not ok then
    errors = errors + 1
    local why = is_bad_message(err)
    if why then
      out:write(string.format("##bad seed %d call %s: %s: %s\n", seed, desc, why,
        tostring(err):sub(1, 300):gsub("\n", " | ")))
    end
  end
  done = done + 1
  if done % 200 == 0 then collectgarbage() end
end
collectgarbage()
out:write(string.format("##done seed %d: %d calls (%d inside kiln.compile), %d raised errors, %d targets, %.1fs\n",
  seed, done, compiled_calls, errors, #targets, now() - start))
print = real_print
