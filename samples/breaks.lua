-- samples/breaks.lua: a small residual MLP whose blocks branch on a value
-- they compute, so capture breaks there: the model for :explain and :breaks.
-- Two blocks (Linear 16 -> 16, ReLU, a boost of weak activations) and a
-- Linear 16 -> 4 head; small: a batch of 2, else 8. The break is at line 14
-- in 'forward', called from line 30 in 'run', as in docs/messages.md;
-- t/capture_*.lua and t/capture_repl.sh cite these lines: keep them.
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn
local Block = nn.Module {
  name = "Block",
  init = function(self, d) self.fc = nn.Linear(d, d) end,
  forward = function(self, x)
    local h = self.fc(x):relu()
    if h:mean() < 0.25 then -- needs h's value: the graph breaks here
      h = h * 2
    end
    return x + h
  end,
}

-- Applies the blocks in turn. The user stack of the break shows it as the
-- caller of the block's forward:
--   samples/breaks.lua:14 in function 'forward'   (Block's)
--   samples/breaks.lua:30 in function 'run'
--   samples/breaks.lua:43 in function 'forward'   (Net's, the compiled one)
local function run(blocks, x)
  for _, block in ipairs(blocks) do
    -- through kiln.nn's __call (kiln's own frames are not in user stacks)
    -- to Block's forward, which breaks the graph; capture goes on after it
    x = block(x)
  end
  return x
end

local Net = nn.Module {
  name = "Net",
  init = function(self, d, n)
    self.blocks = {}
    for i = 1, n do self.blocks[i] = Block(d) end
    self.head = nn.Linear(d, 4)
  end,
  forward = function(self, x)
    local y = run(self.blocks, x)
    return self.head(y)
  end,
}

nn.manual_seed(0)
local model = Net(16, 2):eval()

return {
  name = "breaks",
  model = model,
  inputs = function(opts)
    opts = opts or {}
    local batch = opts.small and 2 or 8
    return { kiln.randn({ batch, 16 }, { seed = 0, dtype = opts.dtype, device = opts.device }) }
  end,
}
