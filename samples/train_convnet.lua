-- samples/train_convnet.lua: the convnet of samples/convnet.lua trained as
-- an image classifier: its BatchNorms in train mode (batch statistics, the
-- running ones updated in place), cross entropy against seeded random
-- labels of its 1000 classes, AdamW. train_step(x, labels) is one whole
-- step (zero_grad, forward, loss, backward, update) and returns the loss:
-- `:load samples/train_convnet.lua` then `:run 20` trains 20 steps and
-- prints the losses, and kiln.compile(spec.train_step) compiles forward,
-- backward and update into one graph. small: 2 images of 32 x 32.
local kiln = rawget(_G, "kiln") or require("kiln")
local F = kiln.nn.functional

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or ""
local base = assert(loadfile(here .. "convnet.lua"))(...)
local model = base.model:train()
local opt = kiln.optim.AdamW(model, { lr = 1e-3 })

return {
  name = "convnet_train",
  model = model,
  optimizer = opt,
  -- a batch: the images of convnet.lua and one label each
  inputs = function(opts)
    opts = opts or {}
    local x = base.inputs(opts)[1]
    local labels = kiln.randint(1, 1001, { x:shape()[1] }, { seed = 1, device = opts.device })
    return { x, labels }
  end,
  train_step = function(x, labels)
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), labels)
    loss:backward()
    opt:step()
    return loss
  end,
}
