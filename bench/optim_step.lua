-- bench/optim_step.lua: an eager optimizer step (AdamW) of each training
-- sample, fused (one compiled update: a kernel a parameter) against op by
-- op (fused = false): ms a step (kiln.time's median, events around the
-- call) and kernels a step. The gradients come from one backward and stay;
-- every timed step applies them again.
--
--   build/kiln bench/optim_step.lua [small]
local kiln = rawget(_G, "kiln") or require("kiln")
local small = (arg and arg[1] == "small") or kiln.default_device() == "cpu"
kiln.session.small = small
print(string.format("# %s, %s sizes", kiln.default_device(), small and "small" or "full"))
for _, file in ipairs({ "samples/train_gcn.lua", "samples/train_convnet.lua", "samples/train_transformer.lua" }) do
  local spec = kiln.load(file, { quiet = true })
  local xs = spec.inputs({ small = small, device = kiln.default_device() })
  local opt = spec.optimizer
  opt:zero_grad()
  spec.train_step(table.unpack(xs)) -- the first step makes the state
  local loss = spec.model(xs[1])
  if spec.name == "transformer_train" then
    loss = kiln.nn.functional.cross_entropy(loss:reshape({ -1, 1000 }), xs[2]:reshape({ -1 }))
  elseif spec.name == "gcn_train" then
    loss = kiln.nn.functional.nll_loss(loss, xs[2])
  else
    loss = kiln.nn.functional.cross_entropy(loss, xs[2])
  end
  opt:zero_grad()
  loss:backward()
  local n = #spec.model:parameters()
  for _, fused in ipairs({ false, true }) do
    for _, g in ipairs(opt.param_groups) do g.fused = fused end
    local r = kiln.time(function() opt:step() end, { iters = small and 20 or 50, warmup = 3, quiet = true })
    print(string.format("%-18s %3d params  %-9s %8.3f ms a step  %5d kernels", spec.name, n,
      fused and "fused" or "op by op", r.median_ms, r.launches))
  end
end
