-- svg_geometry.lua: the geometry of a drawing kiln.render wrote (Graphviz's
-- SVG), for t/viz_render.lua: whether every text fits the shape it belongs
-- to, and whether an edge crosses a cluster's title.
--
-- Text width: kiln's drawings name a list of monospace faces (DejaVu Sans
-- Mono, Courier New, Courier, monospace; viz/kn_viz_gv.h), so a line is as
-- wide in any viewer as its characters times the widest advance among
-- them: DejaVu Sans Mono's 0.602 em (Courier New and Liberation Mono
-- advance 0.600). Height: from the baseline up 0.76 em and down 0.24 em
-- (DejaVu Sans Mono's ascent and descent).
--
-- Graphviz writes each cluster, node and edge as <g class="cluster|node|edge">
-- after the root <g class="graph"> (not nested), all in one coordinate
-- system: a group's shapes are its <polygon>, <ellipse> and rounded boxes
-- (<path> in a node or cluster), an edge's curve is its <path> (cubic
-- Béziers) and arrowhead <polygon>.
local M = {}

M.ADVANCE, M.ASCENT, M.DESCENT = 0.602, 0.76, 0.24
M.TOLERANCE = 0.5 -- points: Graphviz rounds coordinates to 2 decimals

local NAMED = { amp = "&", lt = "<", gt = ">", quot = '"', apos = "'" }

local function decode(s)
  return (s:gsub("&(#?x?)(%w+);", function(kind, v)
    if kind == "#" then return utf8.char(tonumber(v)) end
    if kind == "#x" then return utf8.char(tonumber(v, 16)) end
    return NAMED[v]
  end))
end
M.decode = decode

local function attr(tag, name)
  return tag:match("%s" .. name .. '="([^"]*)"')
end

local function pairs_of(s)
  local pts = {}
  for x, y in s:gmatch("(%-?[%d.]+),(%-?[%d.]+)") do pts[#pts + 1] = { tonumber(x), tonumber(y) } end
  return pts
end

local function bbox(pts)
  local b = { x0 = math.huge, y0 = math.huge, x1 = -math.huge, y1 = -math.huge }
  for _, p in ipairs(pts) do
    b.x0, b.x1 = math.min(b.x0, p[1]), math.max(b.x1, p[1])
    b.y0, b.y1 = math.min(b.y0, p[2]), math.max(b.y1, p[2])
  end
  b.kind, b.area = "box", (b.x1 - b.x0) * (b.y1 - b.y0)
  return b
end

-- The box a text takes: its characters (UTF-8) at M.ADVANCE em, placed by
-- its text-anchor.
function M.text_box(t)
  local w = utf8.len(t.text) * M.ADVANCE * t.size
  local x0 = t.anchor == "middle" and t.x - w / 2 or t.anchor == "end" and t.x - w or t.x
  return { x0 = x0, x1 = x0 + w, y0 = t.y - M.ASCENT * t.size, y1 = t.y + M.DESCENT * t.size }
end

local function parse_group(body, g)
  for tag in body:gmatch("<polygon[^>]*>") do
    local pts = pairs_of(attr(tag, "points") or "")
    if #pts > 0 then
      if g.class == "edge" then g.arrows[#g.arrows + 1] = pts else g.shapes[#g.shapes + 1] = bbox(pts) end
    end
  end
  for tag in body:gmatch("<path[^>]*>") do
    local pts = pairs_of(attr(tag, "d") or "")
    if #pts > 0 then
      if g.class == "edge" then g.curves[#g.curves + 1] = pts else g.shapes[#g.shapes + 1] = bbox(pts) end
    end
  end
  for tag in body:gmatch("<ellipse[^>]*>") do
    local cx, cy = tonumber(attr(tag, "cx")), tonumber(attr(tag, "cy"))
    local rx, ry = tonumber(attr(tag, "rx")), tonumber(attr(tag, "ry"))
    g.shapes[#g.shapes + 1] = { kind = "ellipse", cx = cx, cy = cy, rx = rx, ry = ry, area = math.pi * rx * ry,
      x0 = cx - rx, x1 = cx + rx, y0 = cy - ry, y1 = cy + ry }
  end
  for tag, text in body:gmatch("(<text[^>]*>)(.-)</text>") do
    local t = { text = decode(text), x = tonumber(attr(tag, "x")), y = tonumber(attr(tag, "y")),
      size = tonumber(attr(tag, "font%-size")), anchor = attr(tag, "text%-anchor") or "start",
      family = attr(tag, "font%-family"), group = g }
    t.box = M.text_box(t)
    g.texts[#g.texts + 1] = t
  end
end

-- {groups = {{class, title, shapes, texts, curves, arrows}...}, canvas =
-- the root's background box, texts = every text}.
function M.parse(svg)
  local doc = { groups = {}, texts = {} }
  local starts = {}
  for pos, class in svg:gmatch('()<g id="[^"]*" class="(%w+)"[^>]*>') do starts[#starts + 1] = { pos, class } end
  for i, s in ipairs(starts) do
    local body = svg:sub(s[1], (starts[i + 1] and starts[i + 1][1] or #svg + 1) - 1)
    local g = { class = s[2], title = decode(body:match("<title>(.-)</title>") or ""), shapes = {}, texts = {},
      curves = {}, arrows = {} }
    parse_group(body, g)
    doc.groups[#doc.groups + 1] = g
    for _, t in ipairs(g.texts) do doc.texts[#doc.texts + 1] = t end
    if g.class == "graph" then doc.canvas = g.shapes[1] end
  end
  return doc
end

local function contains_point(s, x, y)
  if s.kind == "ellipse" then return ((x - s.cx) / s.rx) ^ 2 + ((y - s.cy) / s.ry) ^ 2 <= 1 end
  return x >= s.x0 and x <= s.x1 and y >= s.y0 and y <= s.y1
end

-- Whether box b lies inside shape s (within M.TOLERANCE).
function M.inside(b, s)
  local tol = M.TOLERANCE
  if s.kind == "ellipse" then
    local grown = { kind = "ellipse", cx = s.cx, cy = s.cy, rx = s.rx + tol, ry = s.ry + tol }
    return contains_point(grown, b.x0, b.y0) and contains_point(grown, b.x1, b.y0)
      and contains_point(grown, b.x0, b.y1) and contains_point(grown, b.x1, b.y1)
  end
  return b.x0 >= s.x0 - tol and b.x1 <= s.x1 + tol and b.y0 >= s.y0 - tol and b.y1 <= s.y1 + tol
end

local function smallest_containing(shapes, x, y)
  local best
  for _, s in ipairs(shapes) do
    if contains_point(s, x, y) and (not best or s.area < best.area) then best = s end
  end
  return best
end

-- The shape text t belongs to: the smallest of its own group's shapes
-- around its middle; for a node with no shape of its own (a cluster's
-- title, a constant) the smallest cluster around it; an edge's label and
-- anything else, the canvas.
function M.shape_of(doc, t)
  local mx, my = (t.box.x0 + t.box.x1) / 2, (t.box.y0 + t.box.y1) / 2
  local g = t.group
  if g.class == "node" or g.class == "graph" or g.class == "cluster" then
    local s = smallest_containing(g.shapes, mx, my)
    if s then return s end
  end
  if g.class == "node" then
    local clusters = {}
    for _, c in ipairs(doc.groups) do
      if c.class == "cluster" then for _, s in ipairs(c.shapes) do clusters[#clusters + 1] = s end end
    end
    local s = smallest_containing(clusters, mx, my)
    if s then return s end
  end
  return doc.canvas
end

-- The texts that do not fit their shape: {text, box, shape} each.
function M.misfits(doc)
  local bad = {}
  for _, t in ipairs(doc.texts) do
    local s = M.shape_of(doc, t)
    if not s or not M.inside(t.box, s) then bad[#bad + 1] = { text = t, shape = s } end
  end
  return bad
end

function M.describe(m)
  local t, s, b = m.text, m.shape, m.text.box
  return string.format("'%s' (%s, %.1fpt) spans x %.1f..%.1f y %.1f..%.1f; its shape %s", t.text, t.group.title,
    t.size, b.x0, b.x1, b.y0, b.y1,
    s and string.format("%s x %.1f..%.1f y %.1f..%.1f", s.kind, s.x0, s.x1, s.y0, s.y1) or "(none)")
end

-- The box of each cluster's title (a node named X_title, or a cluster's
-- own label): its texts' boxes together.
function M.title_boxes(doc)
  local boxes = {}
  for _, g in ipairs(doc.groups) do
    if (g.class == "cluster" or g.class == "node" and g.title:match("_title$")) and #g.texts > 0 then
      local b = { x0 = math.huge, y0 = math.huge, x1 = -math.huge, y1 = -math.huge, title = g.title }
      for _, t in ipairs(g.texts) do
        b.x0, b.x1 = math.min(b.x0, t.box.x0), math.max(b.x1, t.box.x1)
        b.y0, b.y1 = math.min(b.y0, t.box.y0), math.max(b.y1, t.box.y1)
      end
      boxes[#boxes + 1] = b
    end
  end
  return boxes
end

local function bezier(p0, p1, p2, p3, u)
  local v = 1 - u
  local a, b, c, d = v * v * v, 3 * v * v * u, 3 * v * u * u, u * u * u
  return a * p0[1] + b * p1[1] + c * p2[1] + d * p3[1], a * p0[2] + b * p1[2] + c * p2[2] + d * p3[2]
end

-- Points along an edge: its curves sampled (40 per Bézier segment) and its arrowheads' corners.
local function edge_points(g)
  local pts = {}
  for _, c in ipairs(g.curves) do
    for i = 1, #c - 3, 3 do
      for k = 0, 40 do
        local x, y = bezier(c[i], c[i + 1], c[i + 2], c[i + 3], k / 40)
        pts[#pts + 1] = { x, y }
      end
    end
  end
  for _, a in ipairs(g.arrows) do for _, p in ipairs(a) do pts[#pts + 1] = p end end
  return pts
end

-- Each edge that passes through a cluster title's box: {edge, title, x, y}.
function M.crossings(doc)
  local titles, found = M.title_boxes(doc), {}
  local tol = M.TOLERANCE
  for _, g in ipairs(doc.groups) do
    if g.class == "edge" then
      for _, p in ipairs(edge_points(g)) do
        for _, b in ipairs(titles) do
          if p[1] > b.x0 + tol and p[1] < b.x1 - tol and p[2] > b.y0 + tol and p[2] < b.y1 - tol then
            found[#found + 1] = { edge = g.title, title = b.title, x = p[1], y = p[2] }
            goto next_edge
          end
        end
      end
    end
    ::next_edge::
  end
  return found
end

return M
