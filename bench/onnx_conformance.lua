-- bench/onnx_conformance.lua: the ONNX backend conformance tests (Debian's
-- libonnx-testdata) through kiln.onnx.
--
--   build/kiln bench/onnx_conformance.lua [eager|compiled|gpu|all] [FOLDER...] [-v] [-fPATTERN]
--
-- Modes: eager and compiled on the CPU (the default: both), gpu (gpu-eager
-- and gpu-compiled on the first GPU), all (the four).
--
-- Every test folder holds model.onnx and test_data_set_N/{input_K,output_K}.pb.
-- Each test is loaded, fed its inputs and compared with its expected outputs
-- at the suite's tolerances (rtol 1e-3, atol 1e-7; integers and bools
-- exact; NaN only where NaN is expected), and classified: passed, failed
-- (wrong values, or an error that is not "unsupported") or unsupported (an
-- op or attribute kiln does not implement; the message names it). Prints
-- counts per folder and mode and the unsupported ops with their counts.
-- KILN_ONNX_TESTDATA overrides where the data is. As a library (dofile with
-- ONNX_CONFORMANCE_LIB set) it returns run(opts) for t/onnx_conformance.lua.
local M = {}

M.root = os.getenv("KILN_ONNX_TESTDATA") or "/usr/share/libonnx-testdata/data"
M.folders = { "node", "pytorch-converted", "pytorch-operator", "simple" }
local RTOL, ATOL = 1e-3, 1e-7

local function list_dir(path)
  local p = io.popen('ls -1 "' .. path .. '" 2>/dev/null')
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local function flat(v, out)
  if type(v) ~= "table" then out[#out + 1] = v return out end
  for _, e in ipairs(v) do flat(e, out) end
  return out
end

local function values(t)
  if t:dim() == 0 then return { t:item() } end
  if t:numel() == 0 then return {} end
  return flat(t:tolist(), {})
end

-- nil when got matches want, else what differs.
local function compare(got, want)
  if type(got) ~= "userdata" then return "output is a " .. type(got) .. ", not a tensor" end
  if got.dtype ~= want.dtype then return string.format("dtype %s, expected %s", got.dtype, want.dtype) end
  local gs, ws = got:shape(), want:shape()
  if #gs ~= #ws then return string.format("rank %d, expected %d", #gs, #ws) end
  for d = 1, #gs do
    if gs[d] ~= ws[d] then return string.format("shape {%s}, expected {%s}", table.concat(gs, ","), table.concat(ws, ",")) end
  end
  local g, w = values(got:to("cpu")), values(want)
  local float = want.dtype == "f32" or want.dtype == "f64" or want.dtype == "f16" or want.dtype == "bf16"
  local rtol = RTOL
  if want.dtype == "f16" or want.dtype == "bf16" then rtol = 1e-2 end
  for k = 1, #w do
    local a, b = g[k], w[k]
    if float then
      if b ~= b then
        if a == a then return string.format("element %d: %s, expected NaN", k, tostring(a)) end
      elseif a ~= a then
        return string.format("element %d: NaN, expected %s", k, tostring(b))
      elseif b == math.huge or b == -math.huge then
        if a ~= b then return string.format("element %d: %s, expected %s", k, tostring(a), tostring(b)) end
      elseif math.abs(a - b) > ATOL + rtol * math.abs(b) then
        return string.format("element %d: %.9g, expected %.9g", k, a, b)
      end
    elseif a ~= b then
      return string.format("element %d: %s, expected %s", k, tostring(a), tostring(b))
    end
  end
  return nil
end

local function read_set(dir, prefix)
  local list = {}
  for k = 0, 1000 do
    local p = string.format("%s/%s_%d.pb", dir, prefix, k)
    if not exists(p) then break end
    list[#list + 1] = kiln.onnx.read_tensor(p)
  end
  return list
end

-- The op and reason of an unsupported error ("ONNX node 'n' (Op, opset N): unsupported: ...").
local function unsupported_key(msg)
  local op = msg:match("%((%w+), opset %d+%)")
  local ty = msg:match("has type (%S+)") or msg:match("input type (%S+)")
  if ty then return "load: a graph input or output of type " .. (ty == "not" and "sequence/optional/map" or ty) end
  local why = msg:match("unsupported: (.*)$") or msg:match("has (element type %S+), which kiln does not support")
    or msg:match("(kiln knows opsets.*)$") or msg:match("(imports no version.*)$") or msg
  why = why:gsub("'[^']*%.onnx'", "FILE"):gsub("^%S*model%.onnx:%s*", "")
  if #why > 90 then why = why:sub(1, 90) .. "..." end
  return (op or "load") .. ": " .. why
end

local function run_test(dir, mode)
  local ok, m = pcall(kiln.onnx.load, dir .. "/model.onnx")
  if not ok then
    local msg = tostring(m)
    if msg:find("unsupported") or msg:find("does not support") or msg:find("kiln knows opsets") or msg:find("imports no version") then
      return "unsupported", unsupported_key(tostring(m))
    end
    return "failed", "load: " .. tostring(m)
  end
  -- sequences, optionals and element types kiln lacks: the data files are
  -- not tensors kiln can read, so the test is unsupported before reading them
  local ok2, err = pcall(function()
    if m._unsupported then error(m._unsupported, 0) end
    for _, vi in ipairs(m._inputs) do
      if vi.unsupported_type then error(string.format("unsupported: input type %s", vi.unsupported_type), 0) end
    end
  end)
  if not ok2 then return "unsupported", unsupported_key(tostring(err)) end
  local dev = mode:match("^gpu") and "cuda" or "cpu"
  if dev ~= "cpu" then m:to(dev) end
  local fn = m
  if mode ~= "eager" and mode ~= "gpu-eager" then fn = kiln.compile(m) end
  local sets = 0
  for k = 0, 100 do
    local sd = string.format("%s/test_data_set_%d", dir, k)
    if not exists(sd .. "/input_0.pb") and not exists(sd .. "/output_0.pb") then break end
    sets = sets + 1
    local rok, inputs = pcall(read_set, sd, "input")
    if not rok then
      if tostring(inputs):find("does not support") then return "unsupported", unsupported_key(tostring(inputs)) end
      return "failed", tostring(inputs)
    end
    local wok, wants = pcall(read_set, sd, "output")
    if not wok then
      if tostring(wants):find("does not support") then return "unsupported", unsupported_key(tostring(wants)) end
      return "failed", tostring(wants)
    end
    if dev ~= "cpu" then for j, t in ipairs(inputs) do inputs[j] = t:to(dev) end end
    local res = table.pack(pcall(fn, table.unpack(inputs)))
    if not res[1] then
      local msg = tostring(res[2])
      if msg:find("unsupported") then return "unsupported", unsupported_key(msg) end
      return "failed", msg
    end
    for j, want in ipairs(wants) do
      local diff = compare(res[j + 1], want)
      if diff then return "failed", string.format("set %d output %d: %s", k, j, diff) end
    end
  end
  if sets == 0 then return "failed", "no test data sets" end
  return "passed"
end

-- run{modes = {...}, folders = {...}, verbose =, filter =} -> results
function M.run(opts)
  opts = opts or {}
  local modes = opts.modes or { "eager", "compiled" }
  local results = { rows = {}, unsupported = {}, failures = {} }
  for _, mode in ipairs(modes) do
    for _, folder in ipairs(opts.folders or M.folders) do
      local row = { mode = mode, folder = folder, passed = 0, failed = 0, unsupported = 0 }
      local t0 = kiln.clock()
      for _, name in ipairs(list_dir(M.root .. "/" .. folder)) do
        if not opts.filter or name:find(opts.filter) then
          local dir = M.root .. "/" .. folder .. "/" .. name
          local ok, status, why = pcall(run_test, dir, mode)
          if not ok then status, why = "failed", "runner: " .. tostring(status) end
          row[status] = row[status] + 1
          if status == "unsupported" then
            -- counted once per test: in the first mode run
            if mode == modes[1] then results.unsupported[why] = (results.unsupported[why] or 0) + 1 end
          elseif status == "failed" then
            results.failures[#results.failures + 1] = string.format("%s %s/%s: %s", mode, folder, name, why)
          end
          if opts.verbose then print(string.format("%-11s %s/%s %s", status, folder, name, why or "")) end
          collectgarbage()
        end
      end
      row.seconds = kiln.clock() - t0
      results.rows[#results.rows + 1] = row
    end
  end
  return results
end

function M.report(results, out)
  out = out or print
  out(string.format("%-9s %-18s %7s %7s %11s %8s", "mode", "folder", "passed", "failed", "unsupported", "seconds"))
  for _, r in ipairs(results.rows) do
    out(string.format("%-9s %-18s %7d %7d %11d %8.1f", r.mode, r.folder, r.passed, r.failed, r.unsupported, r.seconds))
  end
  local keys = {}
  for k in pairs(results.unsupported) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if results.unsupported[a] ~= results.unsupported[b] then return results.unsupported[a] > results.unsupported[b] end
    return a < b
  end)
  out(string.format("unsupported: %d reasons (tests per reason, in %s mode)", #keys, results.rows[1] and results.rows[1].mode or "?"))
  for _, k in ipairs(keys) do out(string.format("  %4d  %s", results.unsupported[k], k)) end
  if #results.failures > 0 then
    out("failures:")
    for _, f in ipairs(results.failures) do out("  " .. f) end
  end
end

if rawget(_G, "ONNX_CONFORMANCE_LIB") then return M end

local modes, folders, verbose, filter = nil, {}, false, nil
for _, a in ipairs(arg or {}) do
  if a == "eager" or a == "compiled" or a == "gpu-eager" or a == "gpu-compiled" then modes = { a }
  elseif a == "gpu" then modes = { "gpu-eager", "gpu-compiled" }
  elseif a == "all" then modes = { "eager", "compiled", "gpu-eager", "gpu-compiled" }
  elseif a == "-v" then verbose = true
  elseif a:sub(1, 2) == "-f" then filter = a:sub(3)
  else folders[#folders + 1] = a end
end
if modes and not kiln.cuda_available() then
  local keep = {}
  for _, m in ipairs(modes) do if not m:match("^gpu") then keep[#keep + 1] = m end end
  if #keep < #modes then print("no GPU: the gpu modes are skipped") end
  modes = keep
end
local res = M.run { modes = modes, folders = #folders > 0 and folders or nil, verbose = verbose, filter = filter }
M.report(res)
