-- samples/train_transformer.lua: the transformer block of
-- samples/transformer_block.lua as a small language model: an Embedding of
-- 1000 tokens, the block (causal self-attention), a LayerNorm and a head
-- back to the 1000 tokens, trained on next-token cross entropy over seeded
-- random token sequences, AdamW. train_step(tokens, targets) is one whole
-- step and returns the loss (`:load` it, then `:run 20`); targets are the
-- tokens shifted by one. 16 sequences of 256 tokens, d 512; small: 2 of 16
-- tokens, d 64, 4 heads, MLP 256.
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn
local F = nn.functional

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or ""
local base = assert(loadfile(here .. "transformer_block.lua"))(...)
local small = kiln.session ~= nil and kiln.session.small or false
local args = ...
if type(args) == "table" and args.small ~= nil then small = args.small end

local V = 1000
local D, H, FF, B, T = 512, 8, 2048, 16, 256
if small then D, H, FF, B, T = 64, 4, 256, 2, 16 end

local LM = nn.Module {
  name = "TinyLM",
  init = function(self)
    self.embed = nn.Embedding(V, D)
    self.block = base.Block(D, H, FF)
    self.ln = nn.LayerNorm(D)
    self.head = nn.Linear(D, V)
  end,
  -- tokens {B, T} (1-based ids) -> logits {B, T, V}
  forward = function(self, tokens)
    return self.head(self.ln(self.block(self.embed(tokens))))
  end,
}

nn.manual_seed(0)
local model = LM():train()
local opt = kiln.optim.AdamW(model, { lr = 3e-4 })

return {
  name = "transformer_train",
  model = model,
  optimizer = opt,
  -- one seeded sequence of T + 1 tokens a row: the first T in, the last T
  -- as the targets (each made contiguous: reduce-overhead records a CUDA
  -- graph only for inputs it can copy into a contiguous buffer)
  inputs = function(opts)
    opts = opts or {}
    local seq = kiln.randint(1, V + 1, { B, T + 1 }, { seed = 5, device = opts.device })
    return { seq:slice(2, 1, T):contiguous(), seq:slice(2, 2, T + 1):contiguous() }
  end,
  train_step = function(tokens, targets)
    opt:zero_grad()
    local logits = model(tokens)
    local loss = F.cross_entropy(logits:reshape({ -1, V }), targets:reshape({ -1 }))
    loss:backward()
    opt:step()
    return loss
  end,
}
