-- tap.lua: a small TAP producer for kiln's Lua tests (run by prove via t/run).
--   local T = dofile("t/lib/tap.lua")
--   T.ok(cond, name); T.is(got, want, name); T.like(str, pattern, name)
--   T.near(got, want, tol, name); T.raises(fn, pattern, name); T.skip_all(reason)
--   T.done()  -- prints the plan and exits non-zero on failure
local T = { n = 0, failed = 0 }

local function where()
  local info = debug.getinfo(3, "Sl")
  return info and (info.short_src .. ":" .. info.currentline) or "?"
end

local function report(cond, name, diag)
  T.n = T.n + 1
  io.write((cond and "ok " or "not ok ") .. T.n .. " - " .. tostring(name or "") .. "\n")
  if not cond then
    T.failed = T.failed + 1
    io.write("#   Failed test at " .. where() .. "\n")
    if diag then io.write((diag:gsub("[^\n]+", "#   %0")) .. "\n") end
  end
  io.flush()
  return cond
end

function T.ok(cond, name) return report(cond and true or false, name) end


function T.is(got, want, name)
  return report(got == want, name,
    string.format("     got: %s\nexpected: %s", tostring(got), tostring(want)))
end

function T.like(got, pattern, name)
  local s = tostring(got)
  return report(s:find(pattern) ~= nil, name,
    string.format("     got: %s\nto match: %s", s, pattern))
end

-- |got - want| <= tol (absolute); NaN never passes.
function T.near(got, want, tol, name)
  local good = type(got) == "number" and got == got and math.abs(got - want) <= tol
  return report(good, name, string.format("     got: %s\nexpected: %s (tol %g)",
    tostring(got), tostring(want), tol))
end

-- fn must raise an error whose message matches the Lua pattern.
function T.raises(fn, pattern, name)
  local okc, err = pcall(fn)
  if okc then return report(false, name, "no error raised; expected one matching " .. pattern) end
  return report(tostring(err):find(pattern) ~= nil, name,
    string.format("   error: %s\nto match: %s", tostring(err), pattern))
end

-- The lines of the calling test file that carry "-- @tag" comments:
-- returns LINE (tag -> line number), SRC (the file as messages name it) and
-- at(tag) -> "SRC:LINE", so expected messages follow the code they quote.
function T.tags()
  local info = debug.getinfo(2, "S")
  local src, lines = info.short_src, {}
  local n = 0
  for l in io.lines(info.source:sub(2)) do
    n = n + 1
    local tag = l:match("%-%- @([%w_]+)")
    if tag then lines[tag] = n end
  end
  return lines, src, function(tag) return src .. ":" .. assert(lines[tag], tag) end
end

function T.skip_all(reason)
  io.write("1..0 # SKIP " .. reason .. "\n")
  os.exit(0)
end

-- For a test whose expectations are the CPU backend's (its kernels, its
-- exact texts): on a machine where the default device is a GPU, run this
-- file again with KILN_DEVICE=cpu and exit with its status (its TAP output
-- is this test's). `file`: the test's path.
function T.cpu_only(file)
  if os.getenv("KILN_DEVICE") == "cpu" or kiln.default_device() == "cpu" then return end
  local ok, _, code = os.execute("KILN_DEVICE=cpu " .. (os.getenv("KILN") or "build/kiln") .. " " .. file)
  os.exit(ok and 0 or (code or 1))
end

-- Run Lua chunk `code` in a child kiln (the one $KILN names): opts.env,
-- shell assignments put in front ("KILN_LOGS=fusion"); opts.timeout,
-- seconds before it is stopped; opts.stderr = "apart" keeps stderr out of
-- the output and returns it third (else the two are one text). Returns
-- the output, the exit status, stderr (apart; else nil) and the script's
-- path, which messages name (the file is removed before it returns).
function T.child(code, opts)
  opts = opts or {}
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(code)
  f:close()
  local errf = opts.stderr == "apart" and os.tmpname() or nil
  local p = io.popen(string.format("%s %s%s %s %s", opts.env or "",
    opts.timeout and string.format("timeout %d ", opts.timeout) or "", os.getenv("KILN") or "build/kiln", script,
    errf and ("2>" .. errf) or "2>&1"))
  local out = p:read("a")
  local _, _, rc = p:close()
  os.remove(script)
  local err
  if errf then
    local ef = io.open(errf, "r")
    err = ef and ef:read("a") or ""
    if ef then ef:close() end
    os.remove(errf)
  end
  return out, rc, err, script
end

-- What a shell command writes, stdout and stderr together.
function T.output(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  p:close()
  return out
end

-- The lines holding `word` (a plain string) that KILN_LOGS=fusion prints
-- while kiln ($KILN) runs `script` with `env` (variable assignments or an
-- `env -u NAME`) before the command, joined by newlines. A script that
-- did not run to its end says nothing either: then "the script failed:"
-- and its output, which no expected note matches.
function T.fusion_notes(script, word, env)
  local kiln = os.getenv("KILN") or "build/kiln"
  local out = T.output((env or "") .. " KILN_LOGS=fusion " .. kiln .. " -e \"" .. script
    .. "; print('ran to the end')\" 2>&1")
  if not out:find("ran to the end", 1, true) then return "the script failed: " .. out end
  local lines = {}
  for l in out:gmatch("[^\n]+") do
    if l:find(word, 1, true) then lines[#lines + 1] = l end
  end
  return table.concat(lines, "\n")
end

-- text split into sections at the lines matching `pattern`, whose one
-- capture names the section: {name = the lines after it, each with "\n"}
-- (lines before the first such line are dropped).
function T.sections(text, pattern)
  local by_name, cur = {}, nil
  for line in text:gmatch("[^\n]+") do
    local name = line:match(pattern)
    if name then
      cur = name
      by_name[cur] = ""
    elseif cur then
      by_name[cur] = by_name[cur] .. line .. "\n"
    end
  end
  return by_name
end

function T.diag(msg) io.write((tostring(msg):gsub("[^\n]+", "# %0")) .. "\n") end

-- Seeds for fresh random inputs: the first from KILN_SEED (to rerun a
-- failure) or the clock, printed as a diagnostic (with `note` after it);
-- returns a function giving the next seed on each call.
function T.seeds(note)
  local seed = tonumber(os.getenv("KILN_SEED")) or os.time() % 100000
  T.diag("seed " .. seed .. (note or ""))
  return function()
    seed = seed + 1
    return seed
  end
end

-- The relative difference of two tensors, max |a - b| / max |b|, in
-- float64 on the CPU; math.huge for NaN (which never passes).
function T.rel(a, b)
  a, b = a:to("cpu"):to("f64"), b:to("cpu"):to("f64")
  local r = ((a - b):abs():amax() / (b:abs():amax() + 1e-30)):item()
  return r == r and r or math.huge
end

function T.done()
  io.write("1.." .. T.n .. "\n")
  os.exit(T.failed == 0 and T.n > 0 and 0 or 1)
end

return T
