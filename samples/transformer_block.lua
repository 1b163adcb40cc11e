-- samples/transformer_block.lua: a pre-LayerNorm transformer block (causal
-- self-attention with 8 heads, d 512, MLP 2048 with erf GELU) on 16 x 256
-- tokens: the Block of bench/torch_models.py, same layers, same
-- names (ln1, ln2, qkv, proj, fc1, fc2). small: 2 x 16 tokens.
-- The inputs are seeded, so every load gives the same model and data.
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn

local Block = nn.Module {
  name = "Block",
  init = function(self, d, h, f)
    d, h, f = d or 512, h or 8, f or 2048
    self.h = h
    self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
    self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
    self.fc1, self.fc2 = nn.Linear(d, f), nn.Linear(f, d)
  end,
  -- x: {B, T, D}. Position t attends to positions 1..t only; the mask is
  -- built on x's device for each call, as the PyTorch model does (docs/messages.md's
  -- messages cite this definition line, samples/transformer_block.lua:21).
  forward = function(self, x)
    local s = x:shape()
    local B, T, D = s[1], s[2], s[3]
    local hd = D // self.h
    local q, k, v = self.qkv(self.ln1(x)):split(D, -1)
    q = q:reshape({ B, T, self.h, hd }):transpose(2, 3)
    k = k:reshape({ B, T, self.h, hd }):transpose(2, 3)
    v = v:reshape({ B, T, self.h, hd }):transpose(2, 3)
    local att = q:matmul(k:transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    local mask = kiln.ones({ T, T }, { dtype = "bool", device = x.device }):tril()
    att = att:masked_fill(mask:logical_not(), -math.huge):softmax(-1)
    local y = att:matmul(v):transpose(2, 3):reshape({ B, T, D })
    x = x + self.proj(y)
    return x + self.fc2(self.fc1(self.ln2(x)):gelu())
  end,
}

nn.manual_seed(0)
local model = Block():eval()

return {
  name = "transformer_block",
  model = model,
  Block = Block, -- the class, for samples/train_transformer.lua
  inputs = function(opts)
    opts = opts or {}
    local B, T = 16, 256
    if opts.small then B, T = 2, 16 end
    return { kiln.randn({ B, T, 512 }, { seed = 0, dtype = opts.dtype, device = opts.device }) }
  end,
}
