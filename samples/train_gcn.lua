-- samples/train_gcn.lua: the GCN of samples/gcn.lua trained for node
-- classification: nll_loss of its log-probabilities against a seeded
-- random class (1..7) for every node, AdamW with weight decay, as Kipf and
-- Welling train it (all nodes labelled here). train_step(x, labels) is one
-- whole step and returns the loss (`:load` it, then `:run 20`). The step's
-- work is small (about 0.1 ms of kernels at full size), so launches and
-- host work are most of an eager step: what a compiled step with one CUDA
-- graph removes. small: 200 nodes (set kiln.session.small = true before
-- :load, as for gcn.lua).
local kiln = rawget(_G, "kiln") or require("kiln")
local F = kiln.nn.functional

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or ""
local base = assert(loadfile(here .. "gcn.lua"))(...)
local model = base.model:train()
local opt = kiln.optim.AdamW(model, { lr = 1e-2, weight_decay = 5e-4 })

return {
  name = "gcn_train",
  model = model,
  optimizer = opt,
  -- the node features of gcn.lua and a class for every node
  inputs = function(opts)
    opts = opts or {}
    local x = base.inputs(opts)[1]
    local labels = kiln.randint(1, 8, { model.num_nodes }, { seed = 4, device = opts.device })
    return { x, labels }
  end,
  train_step = function(x, labels)
    opt:zero_grad()
    local loss = F.nll_loss(model(x), labels)
    loss:backward()
    opt:step()
    return loss
  end,
}
