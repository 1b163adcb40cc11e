-- 40_timing.lua: live timing (docs/lua-api.md, docs/repl.md and docs/modes.md): kiln.time,
-- kiln.profile, kiln.trace, the roofline's ceilings (kiln.ceilings,
-- kiln.device), kiln.bench and the REPL commands :time, :bench and
-- :device, on top of kiln.profiler (scripting/kn_lua_timing.c,
-- core/tensor/kn_profile.c).
--
-- How the figures are made:
--   median_ms, min_ms, max_ms  `iters` calls back to back after `warmup`,
--       with a device event between consecutive calls: the device time of
--       each call, idle gaps included (a host-bound call is as long as the
--       host makes it). A call that compiled is not among them
--       (38_steady.lua: warm-up calls are checked one by one, and timed
--       calls that hid a compile are timed again); r.compiles lists it.
--   host_us  on a GPU, the median time a call takes to return to the host
--       (enqueuing its work, which the device runs behind it), each of up
--       to 20 calls started on an idle device so that a full launch queue
--       does not make the host wait for the device; on the CPU,
--       where a call returns when its work is done, the median wall time of
--       a call minus the time its kernels ran.
--   kernels  a separate profiled pass (`profile_iters` calls, default 10,
--       in one profiling session, as the ceilings are measured) with
--       events around every kernel; one row per kernel (per plan
--       kernel, or per eager op name), median over its runs; pct is its
--       share of the kernels' time per call (calls x median).
--   roofline  roof_pct = achieved FLOP/s / min(peak FLOP/s, bandwidth x
--       flops/bytes); for a kernel with no flops, achieved bytes/s over the
--       bandwidth. bytes and flops per kernel follow core/tensor/kn_cost.h.
--       The bandwidth is that measured for the kernel's working set (its
--       bytes; core/tensor/kn_ceilings.h), so it is above 100 only where a
--       ceiling was measured low: printed "NNN!" with a legend line.
--   numbers  a compiled callable's rows carry the kernel numbers of
--       cm:kernels() (:kernels, :src, :autotune); an eager op a plan runs
--       for a kernel (the copy a reshape makes) is a sub-row after it.
local kiln = ...

local P = kiln.profiler
-- The latest kiln.time result (or kiln.profile rows) of each compiled
-- callable, weakly keyed: kiln.render and :graph colour the fused view with it.
P.last_time = P.last_time or setmetatable({}, { __mode = "k" })
local repl = kiln.repl
local fail = repl.error
local session = kiln.session

-- Captured now: tests (and users) may replace kiln.device_info to see how
-- :device prints, but the cache file must name the real device.
local real_device_info = kiln.device_info

local is_tensor, is_compiled, is_callable = repl.is_tensor, repl.is_compiled, repl.is_callable

local function median(list)
  local n = #list
  if n == 0 then return 0 end
  local s = table.move(list, 1, n, 1, {})
  table.sort(s)
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

local default_device = repl.default_device -- 20_repl.lua

-- The device the arguments live on (the first tensor, looking one level
-- into tables), else the default device.
local function device_of(args)
  for i = 1, args.n do
    local a = args[i]
    if is_tensor(a) then return a.device end
    if type(a) == "table" and not getmetatable(a) then
      for _, v in pairs(a) do
        if is_tensor(v) then return v.device end
      end
    end
  end
  return default_device()
end

-- The options of kiln.time and kiln.profile.
local TIME_OPTIONS = { "iters", "warmup", "profile_iters", "device", "ceilings", "quiet" }
local PROFILE_OPTIONS = { "warmup", "profile_iters", "device", "ceilings" }

-- Whether a trailing argument reads as an options table: a plain table
-- whose keys are all names and one of them an option or a typo of one
-- ({iter = 5}). Then it is checked, so that a typo is an error and not an
-- argument the function silently drops; {x = t} or a list stays an argument.
local function looks_like_options(last)
  if type(last) ~= "table" or getmetatable(last) ~= nil or next(last) == nil then return false end
  local option = false
  for k in pairs(last) do
    if type(k) ~= "string" then return false end
    option = option or kiln._did_you_mean(k, TIME_OPTIONS) ~= nil
  end
  return option
end

-- Split (x..., opts) of fname: a trailing table that looks like options is
-- opts, checked against `known`.
local function split_opts(fname, known, ...)
  local args = table.pack(...)
  local last = args[args.n]
  if looks_like_options(last) then
    kiln._check_options(last, fname, known)
    args[args.n] = nil
    args.n = args.n - 1
    return args, last
  end
  return args, {}
end

local function count_opt(opts, key, default, least)
  local v = opts[key]
  if v == nil then return default end
  local n = math.tointeger(v)
  if not n or n < least then
    error(string.format("kiln.time: opts.%s must be an integer >= %d, got %s", key, least, repl.describe_value(v)), 3)
  end
  return n
end

---------------------------------------------------------------------------
-- Ceilings: measured once per device, cached as a small text file.

local memo = {}

local function device_label(dev)
  local ok, info = pcall(real_device_info)
  if ok and type(info) == "table" then
    if dev == "cpu" and info.cpu and info.cpu.name then return info.cpu.name end
    local d = info.cuda and info.cuda.devices and info.cuda.devices[1]
    if dev == "cuda" and d and d.name then return d.name end
  end
  return dev
end

-- The way the ceilings' points are measured, recorded in the file. 5: the
-- matmul rates with b k-contiguous, the layout the default runs fastest
-- (in f32 on Hopper kiln's split-f32 kernel; 4 timed b [k, n], cuBLASLt's
-- strict GEMM, which that kernel beats); 4: each point the best single
-- pass of a copy or an add moving the same bytes, each also with its
-- (first) input just written, as measured, and the copy's figure kept
-- apart (bandwidth_copy) for kernels that write as much as they read (3
-- kept only the better of the two; 2 had no fresh-input add; 1 also
-- raised a small working set's point to any larger one's).
local RULER = "5"

local function cache_path(dev, label)
  local dir = kiln.config and kiln.config.cache_dir or "."
  local slug = (dev .. "-" .. label):gsub("[^%w%-]+", "_"):gsub("_+$", "")
  return dir .. "/device-" .. slug .. ".txt"
end

-- A curve line of a cache file ("bytes:gbps ...") as {{bytes, gbps}, ...};
-- nil where a pair is not two numbers, bytes above 0 and gbps not below.
local function points_of(text)
  local points = {}
  for b, g in (text or ""):gmatch("([%d.e+]+):([%d.e+]+)") do
    b, g = tonumber(b), tonumber(g)
    if not b or not g or b <= 0 or g < 0 then return nil end
    points[#points + 1] = { bytes = b, gbps = g }
  end
  return points
end

-- The values of a cache file, or nil when it is missing, corrupt or for
-- another device.
local function read_ceilings(path, label, clock)
  local f = io.open(path, "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  local c = {}
  for k, v in text:gmatch("\n?([%w_]+) = ([^\n]*)") do c[k] = v end
  local copy, f32, bf16 = tonumber(c.copy_gbps), tonumber(c.f32_gflops), tonumber(c.bf16_gflops)
  if c.device ~= label or not copy or copy <= 0 or not f32 or f32 <= 0 or not bf16 or bf16 < 0 then return nil end
  -- ceilings are timed with the clock kernels are timed with: a file
  -- measured with another one (or before the clock was recorded) is stale
  if c.clock ~= clock then return nil end
  -- how the points were measured (RULER); a file from an older way is stale
  if c.ruler ~= RULER then return nil end
  -- bandwidth by working set ("bytes:gbps ..."); a file from before it had
  -- none (and one DRAM figure that cached kernels beat): measured again
  local bw = points_of(c.bandwidth)
  if not bw or #bw == 0 then return nil end
  for _, p in ipairs(bw) do
    if p.gbps <= 0 then return nil end
  end
  -- the copy's figure at the same working sets, in the same order (0: none)
  local copies = points_of(c.bandwidth_copy)
  if not copies or #copies ~= #bw then return nil end
  for i, p in ipairs(copies) do
    if p.bytes ~= bw[i].bytes then return nil end
    if p.gbps > 0 then bw[i].copy_gbps = p.gbps end
  end
  return { copy_gbps = copy, bandwidth = bw, f32_gflops = f32, bf16_gflops = bf16, date = c.date or "?", clock = clock }
end

-- The measured curve's `field` (gbps, or copy_gbps: the copy's alone) at
-- working set `bytes`, interpolated (in log bytes) between the measured
-- working sets around it; the smallest one's below them, the largest's
-- above. (Taking the smaller neighbour's alone held a 67 MB kernel, whose
-- data comes from DRAM, against 50 MB of L2-resident copies.) nil where a
-- point lacks the field.
local function curve_at(bw, bytes, field)
  for _, p in ipairs(bw) do
    if not p[field] then return nil end
  end
  if bytes <= bw[1].bytes then return bw[1][field] end
  for i = 1, #bw - 1 do
    local a, b = bw[i], bw[i + 1]
    if bytes <= b.bytes then
      local t = (math.log(bytes) - math.log(a.bytes)) / (math.log(b.bytes) - math.log(a.bytes))
      return a[field] + (b[field] - a[field]) * t
    end
  end
  return bw[#bw][field]
end

-- The bandwidth a kernel moving `bytes`, `write_bytes` of them results,
-- can reach: the measured curve at its own working set, for its mix of
-- reads and writes. A kernel that reads no more than it writes (a copy's
-- mix: a layer norm, a ReLU) gets the copy's figure; one that reads twice
-- what it writes or more (an add's mix: a residual add, a reduction) the
-- better of copy and add, as every kernel did before; in between, the two
-- weighed by where its read share lies. The add's two reads a write move
-- more bytes a second than a copy where the buffers fill much of the L2
-- (86% at 12.6 and 50 MB on the H100): held against the add, a copy-shaped
-- kernel could not reach its ceiling even as a plain copy. Ceilings
-- without that table (given by hand) have copy_gbps alone.
local function bandwidth_for(c, bytes, write_bytes)
  local bw = c.bandwidth
  if type(bw) ~= "table" or #bw == 0 then return c.copy_gbps end
  local best = curve_at(bw, bytes, "gbps")
  local copy = write_bytes and bytes > 0 and curve_at(bw, bytes, "copy_gbps")
  if not copy or copy <= 0 or copy >= best then return best end
  local read_share = (bytes - write_bytes) / bytes
  local w = math.min(1, math.max(0, (read_share - 1 / 2) / (2 / 3 - 1 / 2)))
  return copy + (best - copy) * w
end

-- kiln.ceilings{device =, remeasure =, progress = function(path)}: the
-- roofline of a device: {device, name, copy_gbps, f32_gflops, bf16_gflops,
-- date, path, cached}; cached is true when read from the file.
-- An options table (a new one for nil) with keys in `known` only; anything
-- else is the caller's mistake (the checker every API shares).
local function opts_table(opts, fname, known)
  return kiln._check_options(opts, fname, known)
end

function kiln.ceilings(opts)
  opts = opts_table(opts, "kiln.ceilings", { "device", "remeasure", "progress" })
  local dev = opts.device or default_device()
  if type(dev) ~= "string" then
    error(string.format("kiln.ceilings: device must be a string such as \"cpu\" or \"cuda\", got %s", type(dev)), 2)
  end
  local label = device_label(dev)
  local path = cache_path(dev, label)
  local m = memo[path]
  if m and not opts.remeasure then
    local copy = table.move(m, 1, 0, 1, {})
    for k, v in pairs(m) do copy[k] = v end
    copy.cached = true
    return copy
  end
  local clock = P.timing(dev)
  local c = not opts.remeasure and read_ceilings(path, label, clock)
  if c then
    c.cached = true
  else
    if opts.progress ~= nil and type(opts.progress) ~= "function" then
      error(string.format("kiln.ceilings: progress must be a function, got %s", type(opts.progress)), 2)
    end
    if opts.progress then opts.progress(path) end
    c = P.measure(dev)
    c.date = os.date("!%Y-%m-%d %H:%M UTC")
    c.cached = false
    c.clock = clock
    local points, copies = {}, {}
    for i, p in ipairs(c.bandwidth or {}) do
      points[i] = string.format("%.0f:%.3f", p.bytes, p.gbps)
      copies[i] = string.format("%.0f:%.3f", p.bytes, p.copy_gbps or 0)
    end
    local text = string.format(
      "# kiln roofline ceilings, measured once for this device (delete the file to measure again)\n" ..
      "device = %s\ncopy_gbps = %.3f\nf32_gflops = %.3f\nbf16_gflops = %.3f\ndate = %s\n" ..
      "# bandwidth by working set, bytes:GB/s (a kernel's data that fits in a cache moves faster)\n" ..
      "bandwidth = %s\n" ..
      "# the copy's alone at the same working sets (one read a write; 0: none)\n" ..
      "bandwidth_copy = %s\n" ..
      "# what timed each copy and kernel: trace (exact device times, CUPTI) or events\n" ..
      "clock = %s\n" ..
      "# how the points were measured (each one pass moving those bytes, as measured)\n" ..
      "ruler = %s\n",
      label, c.copy_gbps, c.f32_gflops, c.bf16_gflops, c.date, table.concat(points, " "), table.concat(copies, " "), clock, RULER)
    local ok, err = P.write_file(path, text)
    if not ok then io.stderr:write("kiln: could not cache the roofline: ", tostring(err), "\n") end
  end
  c.device, c.name, c.path = dev, label, path
  memo[path] = c
  return c
end

---------------------------------------------------------------------------
-- Per-kernel rows and the table tostring(kiln.time(...)) prints (docs/lua-api.md)

local function fmt_us(us)
  if us >= 1 then return string.format("%.1f", us) end
  return string.format("%.2f", us)
end

local function fmt_rate(x)
  if x == nil then return "-" end
  if x >= 100 then return string.format("%.0f", x) end
  return string.format("%.1f", x)
end

-- roof% as a whole number; above 100 (the kernel beat its ceiling, so
-- the ceiling is wrong) it carries a "!" that the legend explains.
local function roof_text(pct)
  if not pct then return "-" end
  return string.format(pct > 100.5 and "%.0f!" or "%.0f", pct)
end

-- The kernel column is 30 wide as in the design, wider when a name is
-- longer, so that the columns stay aligned.
local function rows_text(kernels)
  local w = 30
  -- a training step: each kernel's part (forward, backward, update) and
  -- its first op's line (a backward kernel's: the forward op it differentiates)
  local training = false
  for _, k in ipairs(kernels) do
    w = math.max(w, #(k.label or k.name))
    training = training or (k.part ~= nil and k.part ~= "forward")
  end
  local head = string.format("  #  %-" .. w .. "s  kind       calls   median us   %%     GB/s   GFLOP/s  roof%%", "kernel")
  local lines = { head .. (training and "  part      line" or "") }
  local fmt = "%3s  %-" .. w .. "s  %-9s  %5d%11s%6.1f%7s%9s%7s"
  for i, k in ipairs(kernels) do
    -- compiled: the kernel's number in :kernels, :src and :autotune (a
    -- sub-row, work done for a kernel, has none); eager: the row's
    local num = k.sub and "" or tostring(k.number or (kernels.numbered and "-" or i))
    local line = string.format(fmt, num, k.label or k.name, k.kind, k.calls, fmt_us(k.median_us), k.pct,
      fmt_rate(k.gbps), fmt_rate(k.gflops), roof_text(k.roof_pct))
    if training and k.part then line = line .. string.format("  %-8s  %s", k.part, k.where or "") end
    lines[#lines + 1] = line
  end
  local legend
  for _, k in ipairs(kernels) do
    if k.roof_pct and k.roof_pct > 100.5 then
      legend = "roof% with !: above the measured ceiling, which is then too low (measured under load?): "
        .. "kiln.ceilings{remeasure = true}"
      break
    end
  end
  return lines, legend
end

-- Number the rows of a compiled callable's kernels as cm:kernels() (and so
-- :kernels, :src and :autotune) does, and put each sub-row (an eager op run
-- for a kernel: the copy a reshape makes for the kernel that reads it)
-- right after its kernel, labelled "#N.copy NAME" (N: the kernel's number),
-- so that it shifts no number. Rows of a plain function keep their order
-- and are numbered by position.
local function number_rows(rows, fn)
  if not is_compiled(fn) then return rows end
  local ok, list = pcall(fn.kernels, fn)
  if not ok or type(list) ~= "table" then return rows end
  local number, entry = {}, {}
  for i, e in ipairs(list) do
    if e.key then number[e.key], entry[e.key] = i, e end
  end
  local subs, out = {}, {}
  for _, k in ipairs(rows) do
    if k.parent then
      k.sub = true
      local n = number[k.parent]
      local what = k.name:find("^contiguous_") and "copy" or "op"
      k.label = string.format("  #%s.%s %s", n or "?", what, k.name)
      subs[k.parent] = subs[k.parent] or {}
      table.insert(subs[k.parent], k)
    else
      k.number = number[k.key]
      local e = entry[k.key]
      if e then k.part, k.where = e.part, e.wheres and e.wheres[1] end
    end
  end
  for _, k in ipairs(rows) do
    if not k.sub then
      out[#out + 1] = k
      for _, s in ipairs(subs[k.key] or {}) do out[#out + 1] = s end
      subs[k.key] = nil
    end
  end
  for _, k in ipairs(rows) do -- work for a kernel that has no row of its own
    if k.sub and subs[k.parent] then out[#out + 1] = k end
  end
  for i = 1, #rows do rows[i] = out[i] end
  rows.numbered = true
  return rows
end

local function total_line(r)
  return string.format("total %.1f us per call (device), host overhead %.0f us (%.1f us per kernel), %d kernels, CUDA graph: %s",
    r.median_ms * 1000, r.host_us, r.host_us_per_kernel, r.launches, r.cuda_graph and "yes" or "no")
end

local KernelList = { __name = "kiln.KernelTimes" }
KernelList.__tostring = function(t)
  local lines, legend = rows_text(t)
  lines[#lines + 1] = string.format("%.1f us per call in %d kernels", t.total_us or 0, t.launches or 0)
  lines[#lines + 1] = legend
  return table.concat(lines, "\n")
end

local Timing = { __name = "kiln.Timing" }
Timing.__tostring = function(r)
  local lines, legend = rows_text(r.kernels)
  -- first the calls that compiled, timed apart from the figures below
  for i, c in ipairs(r.compiles or {}) do table.insert(lines, i, repl.compile_line(c)) end
  lines[#lines + 1] = total_line(r)
  lines[#lines + 1] = legend
  return table.concat(lines, "\n")
end

-- The roofline percentage of one kernel (nil without ceilings or figures).
local function roof(k, c)
  if not c or not k.median_us or k.median_us <= 0 then return nil end
  local bw = bandwidth_for(c, k.bytes, k.write_bytes)
  local peak = (k.dtype == "bf16" or k.dtype == "f16") and c.bf16_gflops > 0 and c.bf16_gflops or c.f32_gflops
  if k.flops > 0 and k.bytes > 0 and bw > 0 and peak > 0 then
    local attainable = math.min(peak, bw * k.flops / k.bytes)
    return k.gflops / attainable * 100
  elseif k.bytes > 0 and bw > 0 then
    return k.gbps / bw * 100
  end
  return nil
end

-- Rows from the records of `ncalls` profiled calls: one per kernel key, in
-- the order they first ran.
local function kernel_rows(recs, ncalls, ceil)
  local rows, by_key = {}, {}
  for _, r in ipairs(recs) do
    local k = by_key[r.key]
    if not k then
      k = { name = r.name, kind = r.kind, dtype = r.dtype, bytes = r.bytes, write_bytes = r.write_bytes,
        flops = r.flops, key = r.key, parent = r.parent, inner = r.inner, times = {} }
      by_key[r.key] = k
      rows[#rows + 1] = k
    end
    k.times[#k.times + 1] = r.ms
  end
  local total, launches = 0, 0
  for _, k in ipairs(rows) do
    k.calls = math.max(1, math.floor(#k.times / ncalls + 0.5))
    k.median_us = median(k.times) * 1000
    k.times = nil
    -- a copy made inside a kernel's call is timed within that kernel's row
    if not k.inner then total = total + k.calls * k.median_us end
    launches = launches + k.calls
  end
  for _, k in ipairs(rows) do
    k.pct = total > 0 and k.calls * k.median_us / total * 100 or 0
    local s = k.median_us * 1e-6
    if s > 0 then
      k.gbps = k.bytes > 0 and k.bytes / s / 1e9 or nil
      k.gflops = k.flops > 0 and k.flops / s / 1e9 or nil
    end
    k.roof_pct = roof(k, ceil)
  end
  return setmetatable(rows, KernelList), total, launches
end

-- Run fn(args) under the profiler n times; the records of the n calls, in
-- the order they ran (kernel_rows takes the median of each kernel's n
-- runs). The calls share sessions, as the ceilings' copies are timed: with
-- a session per call (CUPTI attached and detached around each), a
-- one-kernel call measured about 0.45 us more on the H100 (a bf16 layer
-- norm of 16x256x512: 3.49 us, against 3.01 us with the calls in one
-- session), which the ceilings' own passes never paid. The first call has a
-- session of its own, so that a model of many kernels splits the rest into
-- sessions of at most SESSION_RECORDS records (two events each).
local SESSION_RECORDS = 4096

local function profiled_calls(fn, args, dev, n)
  local recs, per_call, i = {}, nil, 0
  while i < n do
    local calls = per_call and math.max(1, math.min(n - i, SESSION_RECORDS // math.max(1, per_call))) or 1
    P.begin(dev)
    for _ = 1, calls do
      P.progress("profiled calls", i, n)
      local ok, err = pcall(fn, table.unpack(args, 1, args.n))
      if not ok then
        P.cancel()
        error(err, 0)
      end
      i = i + 1
    end
    local got = P.finish()
    per_call = per_call or #got
    table.move(got, 1, #got, #recs + 1, recs)
  end
  return recs
end

local function check_fn(fn, what)
  if not is_callable(fn) then
    error(string.format("%s: expected a compiled model or a function as argument 1, got %s", what, type(fn)), 3)
  end
end

-- cm:stats().replays (CUDA graph replays so far), 0 for a plain function.
local function replays(fn)
  if not is_compiled(fn) then return 0 end
  local ok, s = pcall(fn.stats, fn)
  return ok and type(s) == "table" and tonumber(s.replays) or 0
end


-- Why compiled fn is slow, against its eager form timed on the same
-- arguments (n calls) where it has one: (reason, head, eager_ms), the
-- reason nil when it pays. A function that re-traces at every call is
-- said to do so even when it is not measured slower.
local function slow_against_eager(fn, args, dev, n, compiled_ms)
  local eager, eager_ms, why, head = repl.eager_of(fn), nil, nil, nil
  if eager then
    -- one call first: an eager op's first call may set up its library
    local ok, times = pcall(eager, table.unpack(args, 1, args.n))
    if ok then ok, times = pcall(P.time_calls, n, dev, eager, table.unpack(args, 1, args.n)) end
    if not ok and P.interrupted() then error(times, 0) end -- Ctrl-C stops the timing
    if ok then
      eager_ms = median(times)
      why, head = P.slow_reason(fn, compiled_ms, eager_ms)
    end
  end
  if not why then why, head = P.slow_reason(fn) end
  return why, head, eager_ms
end

-- kiln.time(cm_or_fn, x..., {iters = 100, warmup = 10, profile_iters = 10,
-- quiet = false}): quiet leaves the slow warning to the caller (r.slow).
function kiln.time(fn, ...)
  check_fn(fn, "kiln.time")
  local args, opts = split_opts("kiln.time", TIME_OPTIONS, ...)
  local iters = count_opt(opts, "iters", 100, 1)
  local warmup = count_opt(opts, "warmup", 10, 0)
  local piters = math.min(count_opt(opts, "profile_iters", 10, 1), iters)
  local dev = opts.device or device_of(args)
  -- calls that compiled (a first call, a recompile) are timed apart
  local compiles = repl.warm_up(fn, args, dev, warmup, {})
  local replays0 = replays(fn)
  local device_ms, wall_ms = repl.steady_calls(fn, args, dev, iters, compiles)
  -- the timed calls replayed a recording (the profiled ones below cannot)
  local cuda_graph = replays(fn) > replays0
  local ceil = opts.ceilings
  if ceil == nil then
    local ok, c = pcall(kiln.ceilings, { device = dev })
    ceil = ok and c or false
  end
  local kernels, kernel_us, launches = kernel_rows(profiled_calls(fn, args, dev, piters), piters, ceil or nil)
  number_rows(kernels, fn)
  local sorted = table.move(device_ms, 1, iters, 1, {})
  table.sort(sorted)
  local wall_us = median(wall_ms) * 1000
  local host_us = wall_us - kernel_us
  if dev ~= "cpu" then
    -- each call from an idle device: back to back, the host waits for the
    -- device once the launch queue is full and measures the device instead
    host_us = median(P.host_calls(math.min(iters, 20), dev, fn, table.unpack(args, 1, args.n))) * 1000
  end
  local r = setmetatable({
    median_ms = median(device_ms), min_ms = sorted[1], max_ms = sorted[iters],
    host_us = math.max(0, host_us), kernels = kernels, kernel_us = kernel_us, launches = launches,
    host_us_per_kernel = math.max(0, host_us) / math.max(1, launches),
    cuda_graph = cuda_graph, device = dev, iters = iters, ceilings = ceil or nil, compiles = compiles,
  }, Timing)
  if is_compiled(fn) then
    P.last_time[fn] = r
    -- slower than eager? a few eager calls say (the reason is printed once)
    r.slow, r.slow_head, r.eager_ms = slow_against_eager(fn, args, dev, math.min(iters, 20), r.median_ms)
    if not opts.quiet then repl.warn_slow(fn, r.slow, r.slow_head) end
  end
  return r
end

-- kiln.profile(cm_or_fn, x..., {warmup = 2, profile_iters = 10}): the
-- per-kernel rows alone (a list whose tostring is the table).
function kiln.profile(fn, ...)
  check_fn(fn, "kiln.profile")
  local args, opts = split_opts("kiln.profile", PROFILE_OPTIONS, ...)
  local warmup = count_opt(opts, "warmup", 2, 0)
  local n = count_opt(opts, "profile_iters", 10, 1)
  local dev = opts.device or device_of(args)
  for _ = 1, warmup do fn(table.unpack(args, 1, args.n)) end
  local ceil = opts.ceilings
  if ceil == nil then
    local ok, c = pcall(kiln.ceilings, { device = dev })
    ceil = ok and c or false
  end
  local rows, total, launches = kernel_rows(profiled_calls(fn, args, dev, n), n, ceil or nil)
  number_rows(rows, fn)
  rows.total_us, rows.launches = total, launches
  if is_compiled(fn) then P.last_time[fn] = rows end
  return rows
end

---------------------------------------------------------------------------
-- kiln.trace: one call's kernels as Chrome trace events

-- a string as JSON, by kiln's one writer (05_json.lua)
local function json_string(s) return kiln._json_encode(tostring(s)) end

-- kiln.trace(cm_or_fn, x..., "trace.json"): calls it once to warm up (it
-- may compile), then traces one call. Returns the path and the event count.
function kiln.trace(fn, ...)
  check_fn(fn, "kiln.trace")
  local args = table.pack(...)
  local path = args[args.n]
  if type(path) ~= "string" then
    error("kiln.trace: the last argument must be the output file name (\"trace.json\")", 2)
  end
  args[args.n], args.n = nil, args.n - 1
  local dev = device_of(args)
  fn(table.unpack(args, 1, args.n))
  local recs = profiled_calls(fn, args, dev, 1)
  local events = {}
  for i, r in ipairs(recs) do
    events[i] = string.format(
      '{"name":%s,"cat":%s,"ph":"X","ts":%.3f,"dur":%.3f,"pid":1,"tid":1,"args":{"bytes":%.0f,"flops":%.0f,"dtype":%s}}',
      json_string(r.name), json_string(r.kind), r.start_ms * 1000, r.ms * 1000, r.bytes, r.flops, json_string(r.dtype))
  end
  local text = '{"traceEvents":[\n' .. table.concat(events, ",\n") .. '\n],"displayTimeUnit":"ns"}\n'
  local f, err = io.open(path, "w")
  if not f then error("kiln.trace: cannot write " .. tostring(err), 2) end
  f:write(text)
  f:close()
  return path, #events
end

---------------------------------------------------------------------------
-- kiln.device and :device

-- kiln.device(): kiln.device_info() plus the device timing runs on and its
-- ceilings (measured on first use): {cpu, cuda, device, ceilings}.
function kiln.device(opts)
  opts = opts_table(opts, "kiln.device", { "remeasure", "progress" })
  local info = kiln.device_info()
  info.device = default_device()
  info.ceilings = kiln.ceilings({ device = info.device, remeasure = opts.remeasure, progress = opts.progress })
  return info
end

local function ceilings_line(c)
  local bf16 = c.bf16_gflops > 0 and string.format(" · bf16 matmul %s GFLOP/s", fmt_rate(c.bf16_gflops)) or ""
  return string.format("roofline  copy %s GB/s · f32 matmul %s GFLOP/s%s (%s; timed by %s)",
    fmt_rate(c.copy_gbps), fmt_rate(c.f32_gflops), bf16,
    c.cached and string.format("cached, measured %s, in %s", c.date, c.path) or "measured just now",
    c.clock == "trace" and "the device's trace, CUPTI" or "events")
end

-- The bandwidth curve roof% reads, a working set an entry: "6.3 MB
-- 3575/3575" is the copy's figure, then the better of copy and add (one
-- figure where they are the same); nil without a curve.
local function bandwidth_line(c)
  if type(c.bandwidth) ~= "table" or #c.bandwidth == 0 then return nil end
  local parts = {}
  for _, p in ipairs(c.bandwidth) do
    local mb = p.bytes / 1e6
    local size = string.format(mb >= 10 and "%.0f MB" or mb >= 1 and "%.1f MB" or "%.2f MB", mb)
    local both = (p.copy_gbps and math.abs(p.copy_gbps - p.gbps) >= 0.5)
      and string.format("%s/%s", fmt_rate(p.copy_gbps), fmt_rate(p.gbps)) or fmt_rate(p.gbps)
    parts[#parts + 1] = size .. " " .. both
  end
  return "bandwidth by working set, GB/s (copy/add where they differ): " .. table.concat(parts, " · ")
end

local progress = function(path)
  print(string.format("measuring the roofline once (cached in %s)", path))
  io.flush()
end

local base_device = kiln.cmd.device

repl.register("device", {
  usage = ":device",
  summary = "the devices, and the measured roofline (copy bandwidth, matmul rates)",
  help = [[
Shows the CPU (name, cores, memory) and each CUDA device (name, memory
total and free, SM count, compute capability, L2, driver and runtime), or
why there is none; then the ceilings of the device kiln runs on (the GPU,
else the CPU): bandwidth (the better of a copy and an add, bytes read
plus written, on buffers from cache-sized to beyond the last cache: the
figure shown is the largest, DRAM's) and the f32 and bf16 matmul rates;
then the bandwidth at each working set measured, the copy's figure and
the add's where they differ. They are measured once and cached in
kiln.config.cache_dir (device-NAME.txt; delete it to measure again).
:time's roof% is against them, each kernel against the bandwidth of its
own working set and mix of reads and writes (the copy's for a kernel that
reads as much as it writes, the better of the two for one that reads
twice that).
From Lua: kiln.device() returns the same as a table;
kiln.ceilings{remeasure = true} measures again.]],
}, function()
  local info = base_device and base_device() or kiln.device_info()
  local devices = info and info.cuda and info.cuda.devices or {}
  for i, d in ipairs(devices) do
    local parts = {}
    if d.free_bytes then parts[#parts + 1] = "free " .. repl.fmt_bytes(d.free_bytes) end
    if d.l2_bytes then parts[#parts + 1] = "L2 " .. repl.fmt_bytes(d.l2_bytes) end
    if d.driver then parts[#parts + 1] = "driver " .. tostring(d.driver) end
    if d.runtime then parts[#parts + 1] = "runtime " .. tostring(d.runtime) end
    if #parts > 0 then print(string.format("  %d: %s", i - 1, table.concat(parts, " · "))) end
  end
  local dev = default_device()
  if dev == "cpu" then print("no GPU in use: timing and the roofline are the CPU's") end
  local c = kiln.ceilings({ device = dev, progress = progress })
  print(ceilings_line(c))
  local curve = bandwidth_line(c)
  if curve then print(curve) end
  info = info or {}
  info.device, info.ceilings = dev, c
  return info
end)

---------------------------------------------------------------------------
-- :time

-- Ctrl-C in :time or :bench: how far it got, from the progress line
-- ("interrupted after 37 of 100 timed calls (:bench default)").
local function interrupt_note()
  local phase, done, total, label = P.progress_end()
  if phase == "" then return "interrupted (" .. label .. ")" end
  return string.format("interrupted after %d of %d %s (%s)", done, total, phase, label)
end

repl.register("time", {
  usage = ":time [n]",
  summary = "per-kernel device timing of the loaded model (n calls, default 100)",
  help = [[
Runs the session's model (as :run does: compiled in the session's mode, or
eager) 10 times to warm up, n times back to back (default 100) with device
events between calls, then 10 more calls with events around every kernel,
and prints one line per kernel, numbered as :kernels numbers them (a copy
a reshape makes for kernel N is an indented sub-row "kN.copy ..."): calls
per model call, median time, share of the kernels' time, achieved GB/s and
GFLOP/s, and % of the roofline (min(peak FLOP/s, bandwidth x flops/bytes),
the bandwidth of the kernel's working set, ceilings as :device shows them;
a figure above 100 prints with "!": the ceiling was measured low),
then the total per call, the host overhead, the kernel count and whether
the call replays a CUDA graph. A warm-up call that compiled (the first
call, a recompile) is printed first with its time, which the figures
leave out. When the compiled model re-traces at every call (graph breaks)
or is slower than eager (timed over a few eager calls), the reason and
what to do are printed once. From Lua: kiln.cmd.time(n) returns the table
of kiln.time.]],
}, function(n)
  local count = 100
  if n ~= nil then
    count = math.tointeger(tonumber(n))
    if not count or count < 1 then fail("usage: :time [n] (n must be a positive integer, got '%s')", n) end
  end
  if not session.model then fail("no model loaded (use :load FILE.lua)") end
  local dev = default_device()
  local inputs = session.spec.inputs({ device = dev, dtype = "f32", small = session.small and true or false })
  if type(inputs) ~= "table" then
    fail("inputs(opts) of '%s' must return a list of inputs {x, ...}, got %s", session.file, type(inputs))
  end
  local fn = session.model
  if session.mode ~= "eager" then
    if type(kiln.compile) ~= "function" then fail("mode '%s' needs kiln.compile", session.mode) end
    session.compiled = session.compiled or kiln.compile(session.model, { mode = session.mode, fullgraph = session.fullgraph })
    fn = session.compiled
  end
  local ceil = kiln.ceilings({ device = dev, progress = progress })
  local ninputs = inputs.n or #inputs
  local args = table.move(inputs, 1, ninputs, 1, {})
  args[ninputs + 1] = { iters = count, warmup = math.min(10, count), ceilings = ceil, quiet = true }
  P.progress_start(":time")
  repl.interrupt_note = interrupt_note
  local r = kiln.time(fn, table.unpack(args, 1, ninputs + 1))
  P.progress_end()
  repl.interrupt_note = nil
  if fn == session.compiled then session.warm = true end
  print(tostring(r))
  -- slower than eager (kiln.time timed a few eager calls), said once, after the table
  repl.warn_slow(fn, r.slow, r.slow_head)
  return r
end)

---------------------------------------------------------------------------
-- kiln.bench and :bench: one row per mode

local BENCH_MODES = { "eager", "default", "reduce-overhead", "max-autotune" }

local function sync(dev)
  if type(kiln.synchronize) == "function" then kiln.synchronize(dev) end
end

local function fmt_num(x, f) return x and string.format(f, x) or "-" end

local Bench = { __name = "kiln.Bench" }
Bench.__index = Bench
Bench.__tostring = function(b)
  local lines = { string.format("%-28s %10s %12s %9s %10s %9s", "mode", "eager ms", "compiled ms", "speedup",
    "compile s", "peak MiB") }
  local cached = false
  for _, r in ipairs(b) do
    if r.error then
      lines[#lines + 1] = string.format("%-28s failed: %s", r.mode, r.error)
    else
      -- "!" after the speedup marks a mode slower than eager; "*" a compile from the cache
      lines[#lines + 1] = string.format("%-28s %10s %12s %9s%1s%10s %9s", r.mode, fmt_num(r.eager_ms, "%.3f"),
        fmt_num(r.compiled_ms, "%.3f"), fmt_num(r.speedup, "%.2fx"), r.slow and "!" or " ",
        fmt_num(r.compile_s, r.compile_cached and "%.2f*" or "%.2f"), fmt_num(r.peak_mib, "%.1f"))
      cached = cached or r.compile_cached
    end
  end
  -- why: each reason once (the modes of one model share it), from its first row
  local said = {}
  for _, r in ipairs(b) do
    local key = r.slow_head or r.slow
    if r.slow and not said[key] then
      said[key] = true
      lines[#lines + 1] = "! " .. r.mode .. ": " .. r.slow
    end
  end
  if cached then lines[#lines + 1] = "* its generated kernels came from the cache (kiln.config.cache_dir)" end
  -- calls after the first that compiled, timed apart from the figures
  for _, r in ipairs(b) do
    for _, c in ipairs(r.compiles or {}) do lines[#lines + 1] = r.mode .. ": " .. repl.compile_line(c) end
  end
  return table.concat(lines, "\n")
end

local BENCH_FIELDS = { "mode", "eager_ms", "compiled_ms", "speedup", "compile_s", "peak_mib", "error" }

function Bench:csv()
  local lines = { table.concat(BENCH_FIELDS, ",") }
  for _, r in ipairs(self) do
    local cells = {}
    for i, f in ipairs(BENCH_FIELDS) do
      local v = r[f]
      if type(v) == "number" then cells[i] = string.format("%.6g", v)
      elseif v == nil then cells[i] = ""
      else cells[i] = '"' .. tostring(v):gsub('"', '""') .. '"' end
    end
    lines[#lines + 1] = table.concat(cells, ",")
  end
  return table.concat(lines, "\n") .. "\n"
end

function Bench:json()
  local rows = {}
  for i, r in ipairs(self) do
    local fields = {}
    for _, f in ipairs(BENCH_FIELDS) do
      local v = r[f]
      if type(v) == "number" then fields[#fields + 1] = string.format('"%s":%s', f, kiln._json_encode(v))
      elseif v ~= nil then fields[#fields + 1] = string.format('"%s":%s', f, json_string(v)) end
    end
    rows[i] = "{" .. table.concat(fields, ",") .. "}"
  end
  return "[" .. table.concat(rows, ",") .. "]\n"
end

-- kiln.bench(model, inputs, {modes = {...}, iters = 20, warmup = 3}):
-- inputs is the list of arguments. The median device time per call of
-- back-to-back calls, eager and in each mode; compile s is the first call
-- of a fresh compiled model (capture and compile included), peak MiB the
-- compiled model's peak_bytes. A later call that compiled is kept out of
-- the figures and listed in the row's compiles.
function kiln.bench(model, inputs, opts)
  check_fn(model, "kiln.bench")
  if type(inputs) ~= "table" then error("kiln.bench: inputs must be the list of arguments {x, ...}", 2) end
  opts = opts_table(opts, "kiln.bench", { "modes", "iters", "warmup", "device", "fullgraph", "quiet" })
  local modes = opts.modes or BENCH_MODES
  if type(modes) ~= "table" then
    error(string.format("kiln.bench: modes must be a list of mode names, got %s", type(modes)), 2)
  end
  for _, mode in ipairs(modes) do kiln._check_name(mode, "kiln.bench", "mode", repl.modes) end
  local iters = count_opt(opts, "iters", 20, 1)
  local warmup = count_opt(opts, "warmup", 3, 0)
  local n = inputs.n or #inputs
  local args = table.move(inputs, 1, n, 1, { n = n })
  local dev = opts.device or device_of(args)
  -- the median of calls that compiled nothing; those that did (a
  -- recompile after the first call) go to `compiles`, timed apart
  local function median_ms(fn, compiles)
    repl.warm_up(fn, args, dev, warmup, compiles)
    return median((repl.steady_calls(fn, args, dev, iters, compiles)))
  end
  P.progress_label(":bench eager")
  local eager_ms = median_ms(model, {})
  local rows = setmetatable({}, Bench)
  for _, mode in ipairs(modes) do
    local row = { mode = mode, eager_ms = eager_ms }
    if mode == "eager" then
      row.compiled_ms, row.speedup = eager_ms, 1
    else
      P.progress_label(":bench " .. mode)
      P.progress("first call (compiles)", 0, 1)
      local ok, err = pcall(function()
        local cm = kiln.compile(model, { mode = mode, fullgraph = opts.fullgraph })
        local t0 = kiln.clock()
        cm(table.unpack(args, 1, n))
        sync(dev)
        row.compile_s = kiln.clock() - t0
        local c = cm:last_call().compile_s
        row.compile_cached = c.kernels > 0 and c.kernels_cached == c.kernels or nil
        row.compiles = {}
        row.compiled_ms = median_ms(cm, row.compiles)
        row.speedup = row.compiled_ms > 0 and eager_ms / row.compiled_ms or nil
        local s = cm:stats()
        row.peak_mib = s.peak_bytes and s.peak_bytes / 2 ^ 20 or nil
        local why, head = P.slow_reason(cm, row.compiled_ms, eager_ms)
        if why then
          row.slow, row.slow_head = why, head
          if not opts.quiet then repl.warn_slow(model, why, head) end
        end
      end)
      if not ok and P.interrupted() then error(err, 0) end -- Ctrl-C stops the bench, not one mode
      if not ok then row.error = tostring(err) end
    end
    rows[#rows + 1] = row
  end
  return rows
end

repl.register("bench", {
  usage = ":bench [n]",
  summary = "the loaded model in every mode: eager ms, compiled ms, speedup, compile s, peak MiB",
  help = [[
Runs the session's model eagerly and compiled in each mode (eager, default,
reduce-overhead, max-autotune), n timed calls each (default 20) after a
warm-up, and prints one row per mode. A mode slower than eager is marked
"!" after its speedup, and the reason (graph breaks that make every call
trace again, ...) is printed under the table once, with what to do. A
call after a mode's first that compiled (a recompile: "default: recompiled
(x dim 1: 8 -> 2): 0.21 s") is printed under the table too, its time kept
out of the figures. From Lua: kiln.bench(model, inputs, {modes = {...},
iters = n}) returns the rows (row.slow holds the reason, also printed on
stderr once per model; row.compiles the calls that compiled after the
first); tostring, :csv() and :json() format them.]],
}, function(n)
  local iters = 20
  if n ~= nil then
    iters = math.tointeger(tonumber(n))
    if not iters or iters < 1 then fail("usage: :bench [n] (n must be a positive integer, got '%s')", n) end
  end
  if not session.model then fail("no model loaded (use :load FILE.lua)") end
  local inputs = session.spec.inputs({ device = default_device(), dtype = "f32", small = session.small and true or false })
  P.progress_start(":bench")
  repl.interrupt_note = interrupt_note
  local b = kiln.bench(session.model, inputs, { iters = iters, quiet = true, fullgraph = session.fullgraph })
  P.progress_end()
  repl.interrupt_note = nil
  print(tostring(b))
  return b
end)
