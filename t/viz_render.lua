-- viz_render.lua: kiln.render and kiln.outline (issue 7, docs/lua-api.md):
-- the captured and fused views of a tiny function (its DOT against a
-- golden file), of samples/breaks.lua (a cluster per graph, a break node
-- per break with its reason; a cluster per kernel) and of
-- samples/transformer_block.lua (with and without timings: heat, legend),
-- collapse of repeated blocks, rank direction, and the errors a user can
-- make. SVG is parsed as XML by a small well-formedness checker below (CI
-- has no XML library); the checker is itself tested on broken documents.
-- Device defaults: the same assertions hold on a CPU and on a GPU.
local T = dofile("t/lib/tap.lua")

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p '" .. tmp .. "'")

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

---------------------------------------------------------------------------
-- XML well-formedness (XML 1.0 as far as SVG from Graphviz needs): one root
-- element, tags nested and closed, attributes quoted and not repeated, no
-- bare '<' or '&' in text or values, entities among the predefined five or
-- character references. Returns true, or nil and the reason.

local NAME = "^[%a_:][%w_:%.%-]*"

local function check_text(s, where)
  local pos = 1
  while true do
    local amp = s:find("&", pos, true)
    if not amp then break end
    local ent = s:match("^&([^;]*);", amp)
    if not ent or not (ent == "amp" or ent == "lt" or ent == "gt" or ent == "quot" or ent == "apos"
        or ent:match("^#%d+$") or ent:match("^#x%x+$")) then
      return nil, "bad entity reference in " .. where .. " at: " .. s:sub(amp, amp + 12)
    end
    pos = amp + #ent + 2
  end
  return true
end

local function xml_check(doc)
  local pos, stack, roots = 1, {}, 0
  doc = doc:gsub("^\239\187\191", "")
  while pos <= #doc do
    local lt = doc:find("<", pos, true)
    local text = doc:sub(pos, (lt or #doc + 1) - 1)
    if #stack == 0 and text:find("%S") then return nil, "text outside the root element: " .. text:sub(1, 30) end
    local ok, why = check_text(text, "text")
    if not ok then return nil, why end
    if not lt then break end
    if doc:sub(lt, lt + 3) == "<!--" then
      local e = doc:find("-->", lt + 4, true)
      if not e then return nil, "unterminated comment" end
      pos = e + 3
    elseif doc:sub(lt, lt + 8) == "<![CDATA[" then
      local e = doc:find("]]>", lt, true)
      if not e or #stack == 0 then return nil, "bad CDATA section" end
      pos = e + 3
    elseif doc:sub(lt, lt + 1) == "<?" then
      local e = doc:find("?>", lt, true)
      if not e then return nil, "unterminated processing instruction" end
      pos = e + 2
    elseif doc:sub(lt, lt + 1) == "<!" then
      if #stack > 0 or roots > 0 then return nil, "declaration inside the document" end
      local e = doc:find(">", lt, true) -- Graphviz's DOCTYPE has no internal subset
      if not e then return nil, "unterminated declaration" end
      pos = e + 1
    elseif doc:sub(lt, lt + 1) == "</" then
      local name, e = doc:match("^</([%a_:][%w_:%.%-]*)%s*>()", lt)
      if not name then return nil, "bad end tag at: " .. doc:sub(lt, lt + 20) end
      local open = table.remove(stack)
      if open ~= name then return nil, string.format("</%s> closes <%s>", name, tostring(open)) end
      pos = e
    else
      local name = doc:match(NAME, lt + 1)
      if not name then return nil, "bad tag at: " .. doc:sub(lt, lt + 20) end
      if #stack == 0 then roots = roots + 1 end
      local p = lt + 1 + #name
      local seen = {}
      while true do
        local ws, close = doc:match("^(%s*)(/?>)", p)
        if close then
          p = p + #ws + #close
          if close == ">" then stack[#stack + 1] = name end
          break
        end
        local attr, q = doc:match("^%s+([%a_:][%w_:%.%-]*)%s*=%s*()", p)
        if not attr then return nil, "bad attribute in <" .. name .. "> at: " .. doc:sub(p, p + 20) end
        if seen[attr] then return nil, "attribute " .. attr .. " repeated in <" .. name .. ">" end
        seen[attr] = true
        local quote = doc:sub(q, q)
        if quote ~= '"' and quote ~= "'" then return nil, "unquoted value of " .. attr end
        local e = doc:find(quote, q + 1, true)
        if not e then return nil, "unterminated value of " .. attr end
        local value = doc:sub(q + 1, e - 1)
        if value:find("<", 1, true) then return nil, "'<' in the value of " .. attr end
        local okv, whyv = check_text(value, "attribute " .. attr)
        if not okv then return nil, whyv end
        p = e + 1
      end
      if roots > 1 then return nil, "more than one root element" end
      pos = p
    end
  end
  if #stack > 0 then return nil, "<" .. stack[#stack] .. "> is never closed" end
  if roots ~= 1 then return nil, "no root element" end
  return true
end

T.ok(xml_check('<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg a="1" b=\'x &amp; y\'><g><t>a &lt; b &#10;</t><e/></g></svg>\n'),
  "the XML checker accepts a well-formed document")
for doc, what in pairs({
  ["<a><b></a></b>"] = "crossed tags", ["<a><b></a>"] = "an unclosed tag", ["<a x=1></a>"] = "an unquoted value",
  ['<a x="1" x="2"></a>'] = "a repeated attribute", ["<a>fish & chips</a>"] = "a bare ampersand",
  ["<a></a><b></b>"] = "two roots", ['<a t="a<b"></a>'] = "'<' in a value", ["<a>&nbsp;</a>"] = "an unknown entity",
}) do
  T.ok(not xml_check(doc), "the XML checker rejects " .. what)
end

-- Check that svg is well formed, then return it with its character
-- references decoded (Graphviz writes '-' as &#45;), for the assertions.
local function svg_ok(svg, name)
  local ok, why = xml_check(svg or "")
  if not T.ok(ok and svg:find("<svg", 1, true) ~= nil, name .. ": well-formed SVG") then T.diag(why) end
  local named = { amp = "&", lt = "<", gt = ">", quot = '"', apos = "'" }
  return (svg or ""):gsub("&(#?x?)(%w+);", function(kind, v)
    if kind == "#" then return utf8.char(tonumber(v)) end
    if kind == "#x" then return utf8.char(tonumber(v, 16)) end
    return named[v]
  end)
end

---------------------------------------------------------------------------
-- The golden DOT of a tiny function (CPU tensors: the same on every machine)

local tiny_file = dofile("t/golden/viz_tiny.lua")
local tiny = tiny_file.fn
local cm_tiny = kiln.compile(tiny)
local x = kiln.randn({ 2, 3 }, { seed = 1, device = "cpu" })
local w = kiln.randn({ 3, 4 }, { seed = 2, device = "cpu" })
T.raises(function() kiln.render(cm_tiny, tmp .. "/never.svg") end,
  "kiln%.render: .* has no captured graph yet: call it once before drawing it", "a compiled function never called")
coroutine.wrap(tiny_file.call)(cm_tiny, x, w)
local golden_path = "t/golden/viz_tiny_captured.dot"
local dot = kiln.render(cm_tiny, nil, { view = "captured", format = "dot" })
if os.getenv("KILN_UPDATE_GOLDEN") then
  local f = assert(io.open(golden_path, "w"))
  f:write(dot)
  f:close()
  T.diag("wrote " .. golden_path)
end
local golden = read(golden_path)
if not T.is(dot, golden, "the captured DOT of t/golden/viz_tiny.lua matches " .. golden_path) then
  T.diag(dot)
end
T.is(kiln.render(cm_tiny, nil, { view = "captured", format = "dot" }), dot, "the DOT is the same when drawn again")
T.is(kiln.render(cm_tiny, tmp .. "/tiny.dot", { view = "captured" }), tmp .. "/tiny.dot", "a .dot path returns the path")
T.is(read(tmp .. "/tiny.dot"), dot, "and the file holds the DOT text")
local fused_dot = kiln.render(cm_tiny, nil, { view = "fused", format = "dot" })
T.like(fused_dot, "subgraph cluster_g0_k0 ", "fused DOT: kernel clusters")
T.ok(not fused_dot:find(" us ·", 1, true), "fused DOT: no timings before kiln.time")
T.like(kiln.render(cm_tiny, nil, { view = "captured", format = "dot", rankdir = "lr" }), "rankdir=LR",
  "rankdir = \"lr\" lays the graph out left to right")

---------------------------------------------------------------------------
-- samples/breaks.lua: graphs, breaks, kernels

local spec = kiln.load("samples/breaks.lua")
local cm = kiln.compile(spec.model)
cm(table.unpack(spec.inputs({ small = true })))
local graphs, kernels, breaks = cm:graphs(), cm:kernels(), cm:last_call().break_reasons
T.is(#graphs, 3, "breaks.lua: 3 graphs")
T.is(#breaks, 2, "breaks.lua: 2 breaks in the call")

local captured = kiln.render(cm, tmp .. "/breaks_captured.svg", { view = "captured" })
local svg = svg_ok(read(captured), "breaks.lua captured")
T.is(count(svg, "<title>cluster_g%d+</title>"), #graphs, "captured: one cluster per graph")
T.is(count(svg, "<title>break%d+</title>"), #breaks, "captured: one break node per break")
T.like(svg, "graph break 1: data%-dependent control flow", "captured: the break node says its category")
T.like(svg, "at samples/breaks%.lua:14", "captured: and its line")
T.like(svg, "Reason: data%-dependent control flow: Tensor%.__lt needs the value of a traced tensor",
  "captured: the break's tooltip has the full reason")
T.like(svg, "samples/breaks%.lua:13", "captured: op tooltips name their source line")
T.like(svg, "blocks%.1%.fc%.weight", "captured: parameters by dotted name")
T.like(svg, ">graph 0 output 0<", "captured: a value handed from graph 0 to graph 1")
T.like(svg, ">output 0<", "captured: outputs")
local matmuls = 0
for _, g in ipairs(graphs) do
  for _, n in ipairs(g.nodes) do matmuls = matmuls + (n.op == "matmul" and 1 or 0) end
end
T.ok(matmuls > 0 and count(svg, "<text[^>]*>matmul</text>") == matmuls, "captured: every matmul of the graphs is drawn")

local fused_svg = svg_ok(read(kiln.render(cm, tmp .. "/breaks_fused.svg")), "breaks.lua fused")
T.is(count(fused_svg, "<title>cluster_g%d+_k%d+</title>"), #kernels, "fused: one cluster per kernel")
local named = 0
for i, k in ipairs(kernels) do
  if fused_svg:find(">#" .. i .. " " .. k.name .. " · " .. k.kind, 1, true) then named = named + 1 end
end
T.is(named, #kernels, "fused: each kernel cluster is labeled with its number (as :kernels has it), name and kind")
T.ok(fused_svg:find("kernel 2, " .. kernels[2].name .. " (" .. kernels[2].kind .. ", ", 1, true) ~= nil
  and fused_svg:find("): :src 2 shows its source", 1, true) ~= nil,
  "fused: a kernel title's tooltip says :src K shows its source")
T.is(count(fused_svg, "<title>break%d+</title>"), #breaks, "fused: the breaks are drawn too")
T.like(fused_svg, "%d+ B</text>", "fused: edges into kernels carry the bytes")

local outline = kiln.outline(cm, { view = "captured" })
T.like(outline, "graph 1 %(version 0%): 8 ops, %d+ guards\n", "outline: per graph its op count and guard count")
T.like(outline, "\n  guard: tensor 'x' shape {2, 16} dtype f32 device %a+ contiguous\n", "outline: the captured view lists the guards")
-- the guards in the picture: a note in each captured cluster, all of them in the cluster's tooltip
local guards = cm:guards()
T.ok(#guards >= 1 and #guards[1].guards >= 2, "breaks.lua has guards to draw")
local g1 = guards[1].guards[2]:gsub("'", "&#39;")
T.ok(svg:find("graph 0 · version 0 · 6 ops · " .. #guards[1].guards .. " guards", 1, true) ~= nil,
  "captured: each cluster's title counts its guards")
T.ok(svg:find("guard: " .. g1, 1, true) ~= nil or svg:find("guard: " .. guards[1].guards[2], 1, true) ~= nil,
  "captured: and lists them under the title: " .. guards[1].guards[2])
T.like(fused_svg, "guards of graph 0, version 0 %(a call runs it when all hold%)", "fused: the cluster's tooltip lists the guards")
T.like(outline, "break 1: data%-dependent control flow at samples/breaks%.lua:14: Tensor%.__lt needs",
  "outline: the breaks between graphs")
local fused_outline = kiln.outline(cm)
T.like(fused_outline, "\n    1  " .. kernels[1].name .. "%s+" .. kernels[1].kind .. "%s+" .. kernels[1].ops[1],
  "outline: each kernel with its number, kind and ops")
T.like(fused_outline, "\n   " .. #kernels .. "  " .. kernels[#kernels].name .. " ",
  "outline: the numbers run on across the graphs, as in :kernels")

---------------------------------------------------------------------------
-- samples/transformer_block.lua: heat after kiln.time

spec = kiln.load("samples/transformer_block.lua")
cm = kiln.compile(spec.model)
local inputs = spec.inputs({ small = true })
cm(table.unpack(inputs))
svg = svg_ok(read(kiln.render(cm, tmp .. "/tb_captured.svg", { view = "captured" })), "transformer_block captured")
T.is(count(svg, "<title>cluster_g%d+</title>"), 1, "transformer_block: one graph")
T.like(svg, ">softmax<", "transformer_block: the softmax op is drawn")
svg = read(kiln.render(cm, tmp .. "/tb_plain.svg"))
T.ok(not svg:find("share of the kernels' time", 1, true), "no legend before timing")
local t = kiln.time(cm, inputs[1], { iters = 3, warmup = 1, profile_iters = 2 })
svg = svg_ok(read(kiln.render(cm, tmp .. "/tb_fused.svg")), "transformer_block fused, timed")
kernels = cm:kernels()
T.is(count(svg, "<title>cluster_g%d+_k%d+</title>"), #kernels, "timed: one cluster per kernel")
T.like(svg, "share of the kernels' time %(hottest: [%d.]+%%%)", "timed: the heat legend")
local hottest
for _, k in ipairs(t.kernels) do
  if k.key and not k.key:find("^[%w_]+$") and (not hottest or k.pct > hottest.pct) then hottest = k end
end
T.ok(hottest and svg:find(" " .. hottest.name .. " · ", 1, true)
  and svg:find(string.format("%.1f us · %.1f%%", hottest.median_us, hottest.pct), 1, true),
  "timed: the hottest kernel shows its median time and share")
T.like(svg, 'fill="#f16913"', "timed: the hottest kernel is drawn hot")
T.like(svg, "roof %d+%%", "timed: roofline % where known")
T.like(kiln.outline(cm), "us +[%d.]+%%", "timed: the outline has the times too")
local untimed = kiln.render(cm, nil, { format = "dot", timings = false })
T.ok(not untimed:find("share of the kernels", 1, true), "timings = false draws no heat")
T.like(kiln.render(cm, nil, { format = "dot", timings = t }), "share of the kernels", "timings = a kiln.time result")

---------------------------------------------------------------------------
-- collapse: six identical blocks drawn once

local nn = kiln.nn
nn.manual_seed(0)
local Block = nn.Module {
  name = "Block",
  init = function(self, d) self.ln, self.fc = nn.LayerNorm(d), nn.Linear(d, d) end,
  forward = function(self, y) return y + self.fc(self.ln(y)):gelu() end,
}
local Net = nn.Module {
  name = "Net",
  init = function(self, d, n)
    self.blocks = {}
    for i = 1, n do self.blocks[i] = Block(d) end
    self.head = nn.Linear(d, 4)
  end,
  forward = function(self, y)
    for _, b in ipairs(self.blocks) do y = b(y) end
    return self.head(y)
  end,
}
local net = Net(16, 6):eval()
T.like(read(kiln.render(net, tmp .. "/net.dot", { inputs = { kiln.randn({ 2, 16 }, { seed = 3 }) } })),
  "^digraph kiln {.*layer_norm", "a module with opts.inputs is compiled, called once and drawn")
local cm_net = kiln.compile(net)
cm_net(kiln.randn({ 2, 16 }, { seed = 3 }))
local full = kiln.render(cm_net, nil, { view = "captured", format = "dot" })
local folded = kiln.render(cm_net, nil, { view = "captured", format = "dot", collapse = true })
T.is(count(full, "label=\"layer_norm\\n"), 6, "captured: six layer_norm nodes without collapse")
T.is(count(folded, "label=\"layer_norm\\n"), 1, "captured, collapse: one")
T.like(folded, "subgraph cluster_g0_rep .-× 6: the same", "captured, collapse: the repeated run says its count")
local nk = #cm_net:kernels()
local fsvg = kiln.render(cm_net, nil, { collapse = true, rankdir = "LR" })
fsvg = svg_ok(fsvg, "collapsed fused")
local drawn = count(fsvg, "<title>cluster_g%d+_k%d+</title>")
T.ok(drawn > 0 and drawn < nk and (nk - drawn) % 5 == 0, string.format("fused, collapse: %d of %d kernels drawn", drawn, nk))
T.like(kiln.outline(cm_net, { collapse = true }), "repeated 6 times", "outline, collapse")

---------------------------------------------------------------------------
-- drawings that survive any viewer (issue 32, item 7): every text fits the
-- shape it belongs to at the width of the monospace faces the SVG names,
-- no edge crosses a cluster's title, labels = "lines", the host's share of
-- a call beside the heat, and counts of what only a tooltip shows

local G = dofile("t/lib/svg_geometry.lua")
local FAMILY = "DejaVu Sans Mono, Courier New, Courier, monospace"

-- the checker itself, on made-up drawings: a text wider than its box, an
-- edge through a title, and the same two done right
local function fake_svg(text_x, edge_x)
  return '<svg><g id="graph0" class="graph" transform="x">'
    .. '<polygon fill="white" points="0,0 0,-200 200,-200 200,0 0,0"/>'
    .. '<g id="clust1" class="cluster"><title>cluster_g0</title><path d="M10,-10C10,-10 190,-10 190,-190 10,-190"/></g>'
    .. '<g id="node1" class="node"><title>g0_title</title><text text-anchor="start" x="20" y="-170" '
    .. 'font-size="10.00">graph 0</text></g>'
    .. '<g id="node2" class="node"><title>g0_n0</title><polygon points="50,-50 50,-80 110,-80 110,-50 50,-50"/>'
    .. '<text text-anchor="middle" x="' .. text_x .. '" y="-62" font-size="10.00">matmul</text></g>'
    .. '<g id="edge1" class="edge"><title>g0_n0->g0_n1</title><path d="M' .. edge_x .. ',-190C' .. edge_x .. ',-150 '
    .. edge_x .. ',-120 80,-80"/></g></g></svg>'
end
local bad_doc, good_doc = G.parse(fake_svg(100, 40)), G.parse(fake_svg(80, 150))
T.is(#G.misfits(bad_doc), 1, "the geometry checker finds a text wider than its box ('matmul' at 0.602 em is 36 pt)")
T.is(#G.crossings(bad_doc), 1, "the geometry checker finds an edge through a cluster's title")
T.is(#G.misfits(good_doc) + #G.crossings(good_doc), 0, "and passes the same drawing done right")

-- Every text of the drawing at path fits its shape, no edge crosses a
-- title, every text is in the monospace faces, every cluster has a title.
local function check_geometry(path, name)
  local svg = read(path) or ""
  local doc = G.parse(svg)
  T.ok(#doc.texts > 10, string.format("%s: %d texts to check", name, #doc.texts))
  local misfits = G.misfits(doc)
  if not T.is(#misfits, 0, name .. ": every text fits its shape at 0.602 em per character (titles and legend too)") then
    for i = 1, math.min(#misfits, 5) do T.diag(G.describe(misfits[i])) end
  end
  local crossings = G.crossings(doc)
  if not T.is(#crossings, 0, name .. ": no edge crosses a cluster's title") then
    for i = 1, math.min(#crossings, 5) do
      T.diag(string.format("%s crosses %s at %.1f, %.1f", crossings[i].edge, crossings[i].title, crossings[i].x,
        crossings[i].y))
    end
  end
  local other = 0
  for _, t in ipairs(doc.texts) do other = other + (t.family == FAMILY and 0 or 1) end
  T.is(other, 0, name .. ": every text names the faces '" .. FAMILY .. "'")
  local clusters = 0
  for _, g in ipairs(doc.groups) do clusters = clusters + (g.class == "cluster" and 1 or 0) end
  T.is(#G.title_boxes(doc), clusters, name .. ": each cluster has its title")
  return G.decode(svg), doc
end

local b_spec = kiln.load("samples/breaks.lua")
local b_cm = kiln.compile(b_spec.model)
b_cm(table.unpack(b_spec.inputs({ small = true })))
local b_captured = check_geometry(kiln.render(b_cm, tmp .. "/g_b_captured.svg", { view = "captured" }),
  "breaks.lua captured")
check_geometry(kiln.render(b_cm, tmp .. "/g_b_fused.svg"), "breaks.lua fused")
check_geometry(kiln.render(cm, tmp .. "/g_tb_captured.svg", { view = "captured" }), "transformer_block captured")
local tb_fused = check_geometry(kiln.render(cm, tmp .. "/g_tb_fused.svg"), "transformer_block fused, timed")
check_geometry(kiln.render(cm, tmp .. "/g_tb_lr.svg", { rankdir = "LR" }), "transformer_block fused, left to right")
check_geometry(kiln.render(cm_net, tmp .. "/g_net.svg", { collapse = true }), "six blocks collapsed")
local b_lines = check_geometry(kiln.render(b_cm, tmp .. "/g_b_lines.svg", { view = "captured", labels = "lines" }),
  "breaks.lua captured, labels = lines")
local tb_lines = check_geometry(kiln.render(cm, tmp .. "/g_tb_lines.svg", { labels = "lines" }),
  "transformer_block fused, labels = lines")

local b_dot = kiln.render(b_cm, nil, { view = "captured", format = "dot" })
T.like(b_dot, "fontname=Courier", "DOT: laid out in Courier, whose widths Graphviz knows exactly")
T.like(b_dot, "break0 %-> g1_title%s*%[[^%]]*lhead=cluster_g1", "a break's edge goes to the next graph's title")

-- labels = "lines": each op's file:line in its label (a <text>, not only the tooltip)
local n_ops = 0
for _, g in ipairs(b_cm:graphs()) do n_ops = n_ops + #g.nodes end
local function line_texts(svg) return count(svg, "<text[^>]*>samples/breaks%.lua:%d+</text>") end
T.is(line_texts(b_captured), 0, "without labels = \"lines\" the source lines are only in tooltips")
T.ok(line_texts(b_lines) >= n_ops, string.format("labels = \"lines\": %d file:line texts for %d ops",
  line_texts(b_lines), n_ops))
T.like(b_lines, "<text[^>]*>samples/breaks%.lua:13</text>", "labels = \"lines\": samples/breaks.lua:13 in a label")
T.like(b_lines, "<text[^>]*>user stack:</text>", "labels = \"lines\": a break's label has its user stack")
T.like(tb_lines, "<text[^>]*>samples/transformer_block%.lua:%d+</text>", "labels = \"lines\" in the fused view too")
T.raises(function() kiln.render(b_cm, nil, { labels = "line" }) end,
  "kiln%.render: unknown labels 'line' %(known: plain, lines%); did you mean 'lines'%?", "an unknown labels value")

-- more than six guards or frames: the drawing counts the rest and says where they are
local b_guards = b_cm:guards()
T.ok(#b_guards[2].guards > 6, "breaks.lua's graph 1 has more than six guards")
T.ok(b_captured:find(string.format("... %d more guards: hover this title, or :guards and cm:guards()",
  #b_guards[2].guards - 6), 1, true) ~= nil, "captured: the guards past six are counted, and where to see them said")
local function inner(v, n)
  if n > 0 then return inner(v, n - 1) + 0 end
  if v:mean() > 0 then return v * 2 end
  return v
end
local deep = kiln.compile(function(v) return inner(v, 8) end)
deep(kiln.randn({ 4 }, { seed = 1, device = "cpu" }))
local frames = #deep:last_call().break_reasons[1].stack
T.ok(frames > 6, string.format("a break nine calls deep has %d frames", frames))
local deep_svg = check_geometry(kiln.render(deep, tmp .. "/g_deep.svg", { view = "captured", labels = "lines" }),
  "a deep break, labels = lines")
T.ok(deep_svg:find(string.format("... %d more frames: hover this node, or :breaks", frames - 6), 1, true) ~= nil,
  "labels = \"lines\": a break's frames past six are counted, and where to see them said")

-- the host's share of a call beside the kernels' heat, after kiln.time
local host_pct = 100 * t.host_us / (t.host_us + t.kernel_us)
T.ok(tb_fused:find(string.format("host overhead %.1f us per call (%.0f%% of the call)", t.host_us, host_pct), 1, true)
  ~= nil, "timed: the title gives the host overhead per call and its share of the call")
T.ok(tb_fused:find(string.format("per call: kernels %.1f us (%.0f%%) · host %.1f us (%.0f%%)", t.kernel_us,
  100 - host_pct, t.host_us, host_pct), 1, true) ~= nil, "timed: the legend sets the host's share beside the kernels'")
T.like(kiln.outline(cm), "\nhost overhead [%d.]+ us per call %(%d+%% of the call%)\n", "timed: the outline too")
local host_bound = { kernels = t.kernels, kernel_us = t.kernel_us, host_us = 19 * t.kernel_us }
local hb_path = kiln.render(cm, tmp .. "/g_host_bound.svg", { timings = host_bound })
local hb = check_geometry(hb_path, "a host-bound call")
T.ok(hb:find("host-bound: 95% of each call is the host's; the heat shares out the kernels' 5%", 1, true) ~= nil,
  "host-bound: the title says the heat leaves out the host's 95%")
T.ok(hb:find("host-bound: 95% of each call is the host's, not in the heat", 1, true) ~= nil,
  "host-bound: and the legend notes it")
T.is(tb_fused:find("host-bound", 1, true) ~= nil, host_pct >= 50,
  string.format("host-bound is said exactly when the host has half the call or more (here %.0f%%)", host_pct))
local rows_only = kiln.render(cm, nil, { format = "dot", timings = t.kernels })
T.ok(rows_only:find("share of the kernels", 1, true) and not rows_only:find("host overhead", 1, true),
  "kernel rows alone (kiln.profile) colour the heat and claim no host share")

---------------------------------------------------------------------------
-- mistakes

T.raises(function() kiln.render(cm_tiny, tmp .. "/x.svg", { view = "kernels" }) end,
  "kiln%.render: unknown view 'kernels' %(known: captured, fused%)$", "an unknown view")
T.raises(function() kiln.render(cm_tiny, tmp .. "/no/such/dir/x.svg") end,
  "kiln%.render: cannot write '.*/no/such/dir/x%.svg': No such file or directory", "an unwritable file")
T.raises(function() kiln.render(tiny, tmp .. "/x.svg") end,
  "kiln%.render: argument 1 must be a compiled callable %(kiln%.compile%(f%)%) that has been called, got function",
  "a plain function")
T.raises(function() kiln.render(42, tmp .. "/x.svg") end, "must be a compiled callable .*got number", "a number")
T.raises(function() kiln.render(cm_tiny, tmp .. "/x.png") end,
  "kiln%.render: cannot tell the format of '.*x%.png' from its name", "an unknown file type")
T.raises(function() kiln.render(cm_tiny, tmp .. "/x.svg", "fused") end, "kiln%.render: options must be a table",
  "options that are not a table")
T.raises(function() kiln.render(cm_tiny, tmp .. "/x.svg", { veiw = "fused" }) end,
  "kiln%.render: unknown option 'veiw'", "a misspelt option")
T.raises(function() kiln.render(cm_tiny, tmp .. "/x.svg", { rankdir = "up" }) end,
  "kiln%.render: unknown rankdir 'up'", "an unknown rank direction")
T.raises(function() kiln.render(cm_tiny, tmp .. "/x.svg", { format = "png" }) end,
  "kiln%.render: unknown format 'png'", "an unknown format")
local okline, err = pcall(function() kiln.render(cm_tiny, tmp .. "/x.svg", { view = "kernels" }) end)
T.like(not okline and err, "^t/viz_render%.lua:%d+: ", "the error names the caller's line")

os.execute("rm -rf '" .. tmp .. "'")
-- issue 14: a huge graph is refused with a message instead of hanging in
-- Graphviz, and a FIFO as the output path is refused instead of blocking
do
  local big = kiln.compile(function(x) for _ = 1, 1000 do x = (x + 1):relu() end return x end)
  big(kiln.ones({2}))
  T.raises(function() return kiln.render(big, nil, {view = "captured"}) end,
    "the drawing has %d+ nodes, more than the 2000 Graphviz can lay out", "a 3000-node SVG drawing is refused")
  local okd, dot = pcall(kiln.render, big, nil, {view = "captured", format = "dot"})
  T.ok(okd and #dot > 0, "the same graph as DOT text is drawn")
  local fifo = os.tmpname()
  os.remove(fifo)
  if os.execute("mkfifo '" .. fifo .. ".svg' 2>/dev/null") then
    local small = kiln.compile(function(x) return x + 1 end)
    small(kiln.ones({2}))
    T.raises(function() return kiln.render(small, fifo .. ".svg") end, "not a regular file", "a FIFO as the output path is refused")
    os.remove(fifo .. ".svg")
  end
end

-- issue 33, item 4: a compiled training step is drawn by part: in the
-- captured view the backward's ops filled blue and the optimizer update's
-- purple, in the fused view each kernel outlined and named by its part,
-- with a legend; kiln.outline gives each op's and kernel's part
do
  kiln.session.small = true
  local spec = kiln.load("samples/train_gcn.lua", { quiet = true })
  kiln.session.small = false
  local xs = spec.inputs({ small = true })
  local cm = kiln.compile(spec.train_step)
  for _ = 1, 3 do cm(table.unpack(xs)) end
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "'")
  kiln.render(cm, dir .. "/train_captured.svg", { view = "captured" })
  local cap = svg_ok(read(dir .. "/train_captured.svg"), "training step, captured")
  T.ok(count(cap, 'fill="#deebf7"') >= 10 and count(cap, 'fill="#efe3f5"') >= 10,
    string.format("captured: backward ops filled blue (%d) and update ops purple (%d)", count(cap, 'fill="#deebf7"'),
      count(cap, 'fill="#efe3f5"')))
  T.like(cap, "a training step, ops filled by part:", "captured: the legend names the parts")
  kiln.render(cm, dir .. "/train_fused.svg", { view = "fused" })
  local fused = svg_ok(read(dir .. "/train_fused.svg"), "training step, fused")
  -- a kernel a parameter's update, with its moments stored there; the
  -- gcn's two weights' updates also take their gradients' transposing
  -- copy (a backward op, the kernel's first), so two kernels are update alone
  T.ok(count(fused, 'stroke="#2171b5"') >= 5 and count(fused, 'stroke="#7a3b9e"') >= 2,
    string.format("fused: backward kernels outlined blue (%d), update kernels purple (%d)",
      count(fused, 'stroke="#2171b5"'), count(fused, 'stroke="#7a3b9e"')))
  T.ok(count(fused, "· backward</text>") >= 5 and count(fused, "· update</text>") >= 2,
    string.format("fused: each kernel's title names its part (%d backward, %d update)", count(fused, "· backward</text>"),
      count(fused, "· update</text>")))
  check_geometry(dir .. "/train_captured.svg", "training step, captured")
  check_geometry(dir .. "/train_fused.svg", "training step, fused")
  local outline = kiln.outline(cm, { view = "fused" })
  T.like(outline, "\n +%d+  k%d+_%S+ +%S+ +forward +", "outline: forward kernels marked")
  T.like(outline, "\n +%d+  k%d+_%S+ +%S+ +backward +", "outline: backward kernels marked")
  T.like(outline, "\n +%d+  k%d+_%S+ +%S+ +update +", "outline: update kernels marked")
  kiln.render(cm_tiny, dir .. "/tiny_again.svg", { view = "captured" })
  local plain = svg_ok(read(dir .. "/tiny_again.svg"), "inference, captured")
  T.ok(not plain:find("training step", 1, true) and not plain:find("#deebf7", 1, true),
    "an inference drawing has no parts and no part legend")
  os.execute("rm -rf '" .. dir .. "'")
end

T.done()
