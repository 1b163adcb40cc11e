-- scripts/check_layers.lua: kiln's layering check (run by t/layering.sh).
--
--   lua5.4 scripts/check_layers.lua [--src DIR] [--build DIR] [--graph]
--
-- Reads every C file under the layer folders below, and, when a build folder
-- is given, the symbols of its objects (nm): a module (NAME.c with NAME.h)
-- depends on another when it includes its header or calls, or reads, a
-- symbol the other defines. It fails (exit 1) when
--   * a module depends on a module of a layer it may not use (a lower layer
--     calling a higher one, core/ calling into kernels/, one backend calling
--     another),
--   * a file of a layer not marked `lua` includes Lua's C API (lua.h,
--     lauxlib.h, lualib.h), or
--   * modules of one folder that must stay acyclic form a circle.
-- It prints, per top folder, how many modules are in circles, so a change
-- that adds one shows up before it hardens. --graph prints every edge.
--
-- Why both includes and symbols: a header can be included for a type alone,
-- and a call can be made with a local prototype and no include; either way
-- the lower module would need the higher one to exist.

-- Each layer names the layers it may use. A layer always uses itself. A
-- layer is a folder (dir: its files, less those of a deeper layer) or one
-- module (module: NAME.c with NAME.h); `lua` marks the layers that may
-- include Lua's C API.
local LAYERS = {
  { dir = "core/base",     uses = {} },
  { dir = "core/tensor",   uses = { "core/base" } },
  { dir = "core/autograd", uses = { "core/base", "core/tensor" } },
  { dir = "core/compiler", uses = { "core/base", "core/tensor" } },
  { dir = "core/capture",  uses = { "core/base", "core/tensor", "core/compiler" } },
  -- kernels/kn_kernels: the one file naming every backend (registration)
  { dir = "kernels",       uses = { "core/*", "kernels/*" } },
  { dir = "kernels/cpu",   uses = { "core/*" } },
  { dir = "kernels/cuda",  uses = { "core/*" } },
  { dir = "viz",           uses = { "core/*" } },
  -- onnx/reader: the ONNX reader and writer (protobuf-c), C on top of core
  { dir = "onnx/reader",   uses = { "core/*" } },
  -- scripting: the kiln module's parts (tensor userdata, ops, compile, ...)
  { dir = "scripting",     uses = { "core/*", "kernels", "kernels/*", "viz" }, lua = true },
  -- onnx: kiln.onnx's Lua binding (onnx/kn_lua_onnx.c), over the reader and
  -- scripting's parts (tensor userdata, the state, errors at the user's line)
  { dir = "onnx",          uses = { "core/*", "onnx/reader", "scripting" }, lua = true },
  -- scripting/kn_lua: luaopen_kiln, the top of the Lua side, which opens
  -- scripting's parts and onnx's binding (neither may call it, nor may
  -- scripting's parts call onnx's binding: no circle)
  { module = "scripting/kn_lua", uses = { "core/*", "kernels", "kernels/*", "viz", "scripting", "onnx" }, lua = true },
  { dir = "repl",          uses = { "core/*", "kernels", "kernels/*", "viz", "scripting", "scripting/kn_lua" }, lua = true },
}
for _, L in ipairs(LAYERS) do L.dir = L.dir or L.module end
-- Folders whose modules must not form circles (the rest are reported only).
local ACYCLIC = { "core/base", "core/tensor", "core/autograd", "core/compiler", "core/capture", "kernels/cpu", "kernels/cuda",
                  "onnx", "scripting", "viz", "repl" }

local src, build, show_graph = ".", nil, false
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--src" then src = arg[i + 1]; i = i + 1
    elseif a == "--build" then build = arg[i + 1]; i = i + 1
    elseif a == "--graph" then show_graph = true
    else io.stderr:write("check_layers: unknown argument " .. a .. "\n"); os.exit(2) end
    i = i + 1
  end
end

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function lines_of(cmd)
  local p = assert(io.popen(cmd))
  local t = {}
  for l in p:lines() do t[#t + 1] = l end
  p:close()
  return t
end

-- The layer of a file: the layer of its module if one is, else its deepest
-- folder's.
local function layer_of(path)
  local mod = path:gsub("%.[^./]+$", "")
  local best
  for _, L in ipairs(LAYERS) do
    if L.module == mod then return L end
    if not L.module and path:sub(1, #L.dir + 1) == L.dir .. "/" and (not best or #L.dir > #best.dir) then best = L end
  end
  return best
end

local function may_use(from, to)
  if from == to then return true end
  for _, u in ipairs(from.uses) do
    if u == to.dir then return true end
    if u:sub(-2) == "/*" and to.dir:sub(1, #u - 1) == u:sub(1, -2) then return true end
  end
  return false
end

-- modules: "core/tensor/kn_tensor" -> {files = {...}, layer = L}
local modules, by_base, files = {}, {}, {}
local dirs = {}
for _, L in ipairs(LAYERS) do
  if not L.module then dirs[#dirs + 1] = sh_quote(src .. "/" .. L.dir) end
end
for _, f in ipairs(lines_of("find " .. table.concat(dirs, " ") ..
                            " -type f \\( -name '*.c' -o -name '*.h' -o -name '*.def' \\) 2>/dev/null | sort -u")) do
  local rel = f:sub(#src + 2)
  local L = layer_of(rel)
  if L then
    local mod = rel:gsub("%.[^./]+$", "")
    modules[mod] = modules[mod] or { layer = L, name = mod }
    files[#files + 1] = rel
    local base = rel:match("[^/]+$")
    by_base[base] = by_base[base] or {}
    table.insert(by_base[base], rel)
  end
end

local edges = {} -- edges[a][b] = "why"
local function add_edge(a, b, why)
  if a == b then return end
  edges[a] = edges[a] or {}
  if not edges[a][b] then edges[a][b] = why end
end

-- 1. includes (and Lua's headers, which only `lua` layers may include)
local LUA_HEADERS = { ["lua.h"] = true, ["lauxlib.h"] = true, ["lualib.h"] = true }
local lua_includes = {}
for _, rel in ipairs(files) do
  local from = rel:gsub("%.[^./]+$", "")
  local dir = rel:match("^(.*)/") or ""
  local n = 0
  for line in io.lines(src .. "/" .. rel) do
    n = n + 1
    local any = line:match('^%s*#%s*include%s*["<]([^">]+)[">]')
    if any and LUA_HEADERS[any] and not modules[from].layer.lua then
      lua_includes[#lua_includes + 1] = string.format("%s may not include Lua's C API: %s:%d includes %s",
                                                      modules[from].layer.dir, rel, n, any)
    end
    local inc = line:match('^%s*#%s*include%s*"([^"]+)"')
    if inc then
      local target
      local cands = by_base[inc:match("[^/]+$")] or {}
      for _, c in ipairs(cands) do
        if c == dir .. "/" .. inc then target = c end
      end
      if not target then
        for _, c in ipairs(cands) do
          if c:sub(-#inc - 1) == "/" .. inc then target = target or c end
        end
      end
      if target then add_edge(from, (target:gsub("%.[^./]+$", "")), rel .. ":" .. n .. " includes " .. inc) end
    end
  end
end

-- 2. symbols of the built objects
local nobj = 0
if build then
  local defs, uses = {}, {}
  for _, o in ipairs(lines_of("find " .. sh_quote(build .. "/CMakeFiles") .. " -name '*.o' 2>/dev/null | sort")) do
    local rel = o:match("%.dir/(.-)%.o$")
    local mod = rel and rel:gsub("%.[^./]+$", "")
    if mod and modules[mod] then
      nobj = nobj + 1
      uses[mod] = uses[mod] or {}
      for _, l in ipairs(lines_of("nm -P " .. sh_quote(o))) do
        local name, ty = l:match("^(%S+) (%a)")
        if name then
          if ty == "U" then uses[mod][name] = true
          elseif ty:match("[TDBRCGS]") then defs[name] = mod end
        end
      end
    end
  end
  for mod, syms in pairs(uses) do
    for s in pairs(syms) do
      if defs[s] then add_edge(mod, defs[s], mod .. " uses " .. s .. " (defined in " .. defs[s] .. ")") end
    end
  end
end

-- violations: Lua's headers where they may not be, and the layer order
local bad = lua_includes
for a, outs in pairs(edges) do
  for b, why in pairs(outs) do
    local la, lb = modules[a].layer, modules[b].layer
    if not may_use(la, lb) then
      bad[#bad + 1] = string.format("%s may not use %s: %s", la.dir, lb.dir, why)
    end
  end
end
table.sort(bad)

-- circles (Tarjan's strongly connected components)
local names = {}
for m in pairs(modules) do names[#names + 1] = m end
table.sort(names)
local index, low, onstack, stack, sccs, counter = {}, {}, {}, {}, {}, 0
local function strongconnect(v)
  counter = counter + 1
  index[v], low[v] = counter, counter
  stack[#stack + 1] = v; onstack[v] = true
  local outs = {}
  for w in pairs(edges[v] or {}) do outs[#outs + 1] = w end
  table.sort(outs)
  for _, w in ipairs(outs) do
    if not index[w] then
      strongconnect(w)
      low[v] = math.min(low[v], low[w])
    elseif onstack[w] then
      low[v] = math.min(low[v], index[w])
    end
  end
  if low[v] == index[v] then
    local comp = {}
    repeat
      local w = table.remove(stack)
      onstack[w] = nil
      comp[#comp + 1] = w
    until w == v
    if #comp > 1 then table.sort(comp); sccs[#sccs + 1] = comp end
  end
end
for _, v in ipairs(names) do if not index[v] then strongconnect(v) end end

local function top(m) return m:match("^core/[^/]+") or m:match("^[^/]+/[^/]+") end
local function in_acyclic(m)
  for _, d in ipairs(ACYCLIC) do if m:sub(1, #d + 1) == d .. "/" then return true end end
  return false
end

local total, circled = {}, {}
for _, m in ipairs(names) do
  local t = m:match("^core/") and "core" or m:match("^[^/]+")
  total[t] = (total[t] or 0) + 1
end
for _, comp in ipairs(sccs) do
  local fatal = false
  for _, m in ipairs(comp) do
    local t = m:match("^core/") and "core" or m:match("^[^/]+")
    circled[t] = (circled[t] or 0) + 1
    if in_acyclic(m) then fatal = true end
  end
  local why = {}
  for i, m in ipairs(comp) do
    for _, w in ipairs(comp) do
      if edges[m] and edges[m][w] then why[#why + 1] = "    " .. edges[m][w]; break end
    end
    if i >= 6 then why[#why + 1] = "    ..."; break end
  end
  local msg = string.format("circle of %d modules%s: %s\n%s", #comp,
                            fatal and "" or " (reported only)", table.concat(comp, " "),
                            table.concat(why, "\n"))
  if fatal then bad[#bad + 1] = msg else print("# " .. msg:gsub("\n", "\n# ")) end
end

if show_graph then
  for _, a in ipairs(names) do
    local outs = {}
    for b in pairs(edges[a] or {}) do outs[#outs + 1] = b end
    table.sort(outs)
    if #outs > 0 then print(a .. " -> " .. table.concat(outs, " ")) end
  end
end

local tops = {}
for t in pairs(total) do tops[#tops + 1] = t end
table.sort(tops)
for _, t in ipairs(tops) do
  print(string.format("modules in circles: %-9s %d of %d", t, circled[t] or 0, total[t]))
end
print(string.format("checked %d modules, %d objects%s", #names, nobj,
                    build and "" or " (no build folder: includes only)"))
for _, b in ipairs(bad) do io.stderr:write("layering: " .. b .. "\n") end
os.exit(#bad == 0 and 0 or 1)
