-- t/lib/record_writes.lua, run by t/record_writes.sh by default and with
-- KILN_RECORD_WRITES=0: a compiled training step in reduce-overhead on the
-- GPU whose recording writes the parameters and the optimizer's state into
-- their tensors itself (kn_plan_run_recorded_into; with the switch at 0 it
-- writes none, and the caller copies them), against the same steps run
-- eagerly; max-autotune's recording, which is timed by replaying it, writes
-- nothing itself.
local T = dofile("t/lib/tap.lua")
if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end
local writes_on = os.getenv("KILN_RECORD_WRITES") ~= "0"
local switch = writes_on and "" or " (KILN_RECORD_WRITES=0)"
local nn = kiln.nn
local F = nn.functional

local S = dofile("t/lib/train_step.lua")
local maxdiff = S.maxdiff

local Net = nn.Module {
  name = "Net",
  init = function(self) self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4)) end,
  forward = function(self, x) return self.body(x) end,
}
local x = kiln.randn({ 12, 6 }, { seed = 21 }):to("cuda")
local y = kiln.tensor({ 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4 }, { dtype = "i64" }):to("cuda")

local step_of = S.step_of

for _, mode in ipairs({ "reduce-overhead", "max-autotune" }) do
  nn.manual_seed(7)
  local m1 = Net():to("cuda")
  nn.manual_seed(7)
  local m2 = Net():to("cuda")
  local opt1, opt2 = kiln.optim.AdamW(m1, { lr = 1e-2 }), kiln.optim.AdamW(m2, { lr = 1e-2 })
  local eager, cm = step_of(m1, opt1), kiln.compile(step_of(m2, opt2), { mode = mode })
  local worst_loss, worst_param = 0, 0
  for _ = 1, 20 do
    local a, b = eager(x, y):item(), cm(x, y):item()
    worst_loss = (a == a and b == b) and math.max(worst_loss, math.abs(a - b)) or math.huge
    for i, p in ipairs(m1:parameters()) do
      local d = maxdiff(p, m2:parameters()[i])
      worst_param = d == d and math.max(worst_param, d) or math.huge
    end
  end
  local st = cm:stats()
  local s1, s2 = opt1.state[m1.body[1].weight], opt2.state[m2.body[1].weight]
  local moments = math.max(maxdiff(s1.exp_avg, s2.exp_avg), maxdiff(s1.exp_avg_sq, s2.exp_avg_sq))
  local label = mode .. switch
  if mode == "reduce-overhead" then
    T.ok(st.replays >= 15, string.format("%s: the steps replay a recording (%d of 20)", label, st.replays))
  end
  if mode == "reduce-overhead" and writes_on then
    -- 4 parameters, their 2 moments and a step count each
    T.ok(st.recorded_writes >= 12, string.format("%s: the recording writes the parameters and moments itself (%d values)",
      label, st.recorded_writes))
  elseif mode == "reduce-overhead" then
    T.is(st.recorded_writes, 0, label .. ": with the switch off the recording writes nothing itself")
  else -- (it may also keep no recording at all: measured slower)
    T.is(st.recorded_writes, 0, label .. ": a recording max-autotune times by replaying writes nothing itself")
  end
  T.ok(worst_loss <= 1e-5, string.format("%s: every step's loss is eager's (max difference %g)", label, worst_loss))
  T.ok(worst_param <= 1e-5, string.format("%s: ... and so are the parameters after each step (%g)", label, worst_param))
  T.ok(moments <= 1e-5, string.format("%s: ... and the moments (%g)", label, moments))
  T.is(s2.step:item(), 20, label .. ": the step count counts every replayed step")
end
T.done()
