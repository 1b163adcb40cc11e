-- samples/gcn.lua: a 2-layer graph convolutional network (Kipf & Welling)
-- on a random graph of 2708 nodes with 1433 features, 10556 edges plus self
-- loops, hidden 16, 7 classes: the GCN of bench/torch_models.py.
-- Messages along each edge are scaled by deg(src)^-1/2 deg(dst)^-1/2
-- (gathered with index_select, summed with index_add); the output is
-- log_softmax over the classes. The graph lives in the model as buffers
-- (src, dst, norm), so it is saved with the weights and moves with :to().
--
-- small: 200 nodes and 780 edges (about the same edges per node). The graph
-- is part of the model, so its size is fixed when the file is loaded: set
-- kiln.session.small = true before :load (or pass {small = true} to the
-- chunk); inputs() always matches the model's graph.
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn

local args = ...
local small = kiln.session ~= nil and kiln.session.small or false
if type(args) == "table" and args.small ~= nil then small = args.small end

local N, Fin, H, C, E = 2708, 1433, 16, 7, 10556
if small then N, E = 200, 780 end

-- Random edges plus a self loop per node (1-based node numbers), and the
-- symmetric normalization of each edge.
local function random_graph(n, e)
  local src = kiln.randint(1, n + 1, { e }, { seed = 1 })
  local dst = kiln.randint(1, n + 1, { e }, { seed = 2 })
  local loops = kiln.arange(1, n + 1)
  src, dst = kiln.cat({ src, loops }, 1), kiln.cat({ dst, loops }, 1)
  local deg = kiln.zeros({ n }):index_add(1, dst, kiln.ones({ e + n }))
  local norm = deg:index_select(1, src):rsqrt() * deg:index_select(1, dst):rsqrt()
  return src, dst, norm
end

local GCN = nn.Module {
  name = "GCN",
  init = function(self, n, fin, hidden, classes, e)
    self.num_nodes = n
    self.l1, self.l2 = nn.Linear(fin, hidden), nn.Linear(hidden, classes)
    local src, dst, norm = random_graph(n, e)
    self:register_buffer("src", src)
    self:register_buffer("dst", dst)
    self:register_buffer("norm", norm)
  end,
  -- h'[d] = sum over edges s -> d of norm * h[s]
  prop = function(self, h)
    local norm = self.norm:reshape({ -1, 1 })
    if norm.dtype ~= h.dtype then norm = norm:to(h.dtype) end
    local msg = h:index_select(1, self.src) * norm
    return kiln.zeros(h:shape(), { dtype = h.dtype, device = h.device }):index_add(1, self.dst, msg)
  end,
  forward = function(self, x)
    local h = self:prop(self.l1(x)):relu()
    return self:prop(self.l2(h)):log_softmax(-1)
  end,
}

nn.manual_seed(0)
local model = GCN(N, Fin, H, C, E):eval()

return {
  name = "gcn",
  model = model,
  inputs = function(opts)
    opts = opts or {}
    -- sparse binary features, as bag-of-words node features
    local x = kiln.rand({ model.num_nodes, Fin }, { seed = 3, device = opts.device }):lt(0.02)
    return { x:cast(opts.dtype or "f32") }
  end,
}
