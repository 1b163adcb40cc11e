-- 23_repl_system.lua: the REPL commands about kiln itself rather than the
-- model: :device, :help and :quit; and the banner the interactive REPL
-- starts with. They come after the model's commands in
-- :help because this file runs after 21_repl_model.lua and
-- 22_repl_inspect.lua; 40_timing.lua replaces :device (with the measured
-- roofline) in its place.
local kiln = ...
local repl = kiln.repl
local cmd = kiln.cmd
local fail = repl.error
local fmt_bytes = repl.fmt_bytes

---------------------------------------------------------------------------
-- :device (40_timing.lua registers its own over this one, in this place)

repl.register("device", {
  usage = ":device",
  summary = "the CPU and the CUDA devices kiln can use",
  help = [[
Shows the CPU (name, cores, memory) and, for CUDA, whether this kiln was
built with it, each device's name, memory, SM count and compute capability,
or the reason there is none. From Lua: kiln.cmd.device() also returns
kiln.device_info().]],
}, function()
  if type(kiln.device_info) ~= "function" then fail("kiln.device_info is not available in this build") end
  local info = kiln.device_info()
  local cpu, cuda = info.cpu or {}, info.cuda or {}
  local lines = {
    string.format("CPU   %s · %s cores · %s", cpu.name or "unknown", tostring(cpu.cores or "?"), fmt_bytes(cpu.memory_bytes)),
  }
  local devices = cuda.devices or {}
  if not cuda.built then
    lines[#lines + 1] = "CUDA  not built (this kiln was compiled without the CUDA toolkit)"
  elseif #devices == 0 then
    lines[#lines + 1] = "CUDA  built; " .. tostring(cuda.error or "no device found")
  else
    lines[#lines + 1] = string.format("CUDA  %d device%s", #devices, #devices == 1 and "" or "s")
    for i, d in ipairs(devices) do
      lines[#lines + 1] = string.format("  %d: %s · %s · %s SMs · compute capability %s", i - 1,
        d.name or "?", fmt_bytes(d.memory_bytes), tostring(d.sm_count or "?"), tostring(d.cc or "?"))
    end
    if cuda.error then lines[#lines + 1] = "  note: " .. tostring(cuda.error) end
  end
  print(table.concat(lines, "\n"))
  return info
end)

---------------------------------------------------------------------------
-- :help, :quit

repl.register("help", {
  usage = ":help [CMD]",
  summary = "list the commands, or show the details of one",
}, function(name)
  if name == nil then
    io.stdout:write(repl.help_text())
    return
  end
  name = tostring(name):gsub("^:", "")
  local c = repl.command_info(name)
  if not c or not cmd[name] then repl.unknown_command(name) end
  print(c.usage .. "\n" .. (c.help or c.summary))
end)

repl.register("quit", {
  usage = ":quit",
  summary = "leave kiln (as Ctrl-D does)",
}, function()
  -- In the REPL, on_quit ends the loop after this line, so the exit status
  -- still tells whether earlier lines failed; elsewhere, exit at once.
  if type(repl.on_quit) == "function" then return repl.on_quit() end
  os.exit(0)
end)

---------------------------------------------------------------------------
-- :history

repl.register("history", {
  usage = ":history [N]",
  summary = "the chunks typed so far, numbered as locations name them (stdin#N:LINE)",
  help = [[
Typed Lua is numbered chunk by chunk: an error, a graph break's stack or a
guard says stdin#12:3 for line 3 of the 12th chunk. :history lists the last
20 chunks with their numbers; :history N shows chunk N whole, its lines
numbered. Piped input keeps stdin's own line numbers (stdin:LINE) and has
no history.]],
}, function(n)
  local chunks = repl.chunks or {}
  local last = 0
  for k in pairs(chunks) do last = math.max(last, k) end
  if n ~= nil then
    local k = math.tointeger(tonumber(n))
    if not k or not chunks[k] then fail("no chunk %s (typed chunks: 1 to %d)", tostring(n), last) end
    local i = 0
    for line in (chunks[k] .. "\n"):gmatch("(.-)\n") do
      i = i + 1
      print(string.format("stdin#%d:%d  %s", k, i, line))
    end
    return chunks[k]
  end
  if last == 0 then
    print("no typed chunks yet (piped input is named stdin:LINE)")
    return
  end
  for k = math.max(1, last - 19), last do
    if chunks[k] then print(string.format("%4d  %s", k, (chunks[k]:gsub("\n", " ⏎ ")))) end
  end
end)

---------------------------------------------------------------------------
-- The banner: what a person at a terminal sees first (repl/kn_repl.c prints
-- it before the first prompt; piped input gets none, so scripts that feed
-- kiln see only their own output).

-- The device's name for the banner: "cpu (Intel ...)", "cuda (NVIDIA H100 ...)".
local function device_line(dev)
  local ok, info = pcall(kiln.device_info)
  local name
  if ok and type(info) == "table" then
    if dev == "cpu" then name = info.cpu and info.cpu.name
    else
      local d = info.cuda and info.cuda.devices and info.cuda.devices[1]
      name = d and d.name
    end
  end
  return name and string.format("%s (%s)", dev, name) or dev
end

-- "kiln 0.1.0 (Lua 5.4) · mode eager · device cpu (NAME)" and how to go on.
function repl.banner()
  local model = kiln.session.model and (" · model " .. tostring(kiln.session.name)) or ""
  return string.format("kiln %s (%s) · mode %s · device %s%s\n"
    .. "Type Lua, or :help for the commands (:mode, :load, :run ...); Ctrl-D or :quit leaves.",
    tostring(kiln.version), _VERSION, kiln.session.mode, device_line(repl.default_device()), model)
end
