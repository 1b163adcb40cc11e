-- kiln.onnx ops: RNN, GRU and LSTM.
-- Each op takes (inputs, attrs, node) and returns its outputs; import.lua
-- holds the loader, the graph walk and the helpers the op files share
-- (kiln.onnx._shared).
local kiln = ...
local S = kiln.onnx._shared
local ops = S.ops
local unsupported, to_tensor, ints, full_like_shape, cat = S.unsupported, S.to_tensor, S.ints, S.full_like_shape, S.cat

-- RNN, GRU, LSTM: the recurrences of the ONNX spec unrolled over the
-- sequence with kiln's matmul and pointwise ops (default activations,
-- forward, reverse or bidirectional, layout 0 or 1; no sequence_lens, clip
-- or custom activations).
local function recurrent(kind)
  local gates = ({ RNN = 1, GRU = 3, LSTM = 4 })[kind]
  return function(i, a, node)
    local x, W, R = to_tensor(i[1]), to_tensor(i[2]), to_tensor(i[3])
    local B = i[4] and to_tensor(i[4]) or nil
    if i[5] then
      -- lengths that are all the full sequence change nothing
      local seq_len = (a.layout or 0) == 1 and x:shape()[2] or x:shape()[1]
      for _, l in ipairs(ints(i[5], "sequence_lens")) do
        if l ~= seq_len then unsupported("%s with sequence_lens shorter than the sequence", kind) end
      end
    end
    if a.activations then
      local default = ({ RNN = { "Tanh" }, GRU = { "Sigmoid", "Tanh" }, LSTM = { "Sigmoid", "Tanh", "Tanh" } })[kind]
      for k, act in ipairs(a.activations) do
        if act ~= default[(k - 1) % #default + 1] then unsupported("%s with activation %s", kind, act) end
      end
    end
    if a.clip then unsupported("%s with clip", kind) end
    if (a.input_forget or 0) ~= 0 then unsupported("LSTM with input_forget") end
    local layout = a.layout or 0
    if layout == 1 then x = x:transpose(1, 2) end -- {batch, seq, input} -> {seq, batch, input}
    local hidden = a.hidden_size or (W:shape()[2] // gates)
    local dir = a.direction or "forward"
    local ndir = W:shape()[1]
    local seq, batch = x:shape()[1], x:shape()[2]
    local h0 = i[6] and to_tensor(i[6]) or nil
    local c0 = i[7] and to_tensor(i[7]) or nil
    local P = i[8] and to_tensor(i[8]) or nil
    local ys, hs, cs = {}, {}, {}
    for d = 1, ndir do
      local reverse = dir == "reverse" or (dir == "bidirectional" and d == 2)
      local Wd, Rd = W:slice(1, d, d):squeeze(1), R:slice(1, d, d):squeeze(1)
      local function gate(m, g) return m:slice(1, g * hidden + 1, (g + 1) * hidden) end
      local Wg, Rg, Wb, Rb = {}, {}, {}, {}
      for g = 0, gates - 1 do
        Wg[g] = gate(Wd, g):transpose(1, 2)
        Rg[g] = gate(Rd, g):transpose(1, 2)
        if B then
          local Bd = B:slice(1, d, d):squeeze(1)
          Wb[g] = Bd:slice(1, g * hidden + 1, (g + 1) * hidden)
          Rb[g] = Bd:slice(1, (gates + g) * hidden + 1, (gates + g + 1) * hidden)
        end
      end
      local function lin(v, M, b) local r = v:matmul(M); if b then r = r + b end; return r end
      local h = h0 and h0:slice(1, d, d):squeeze(1) or full_like_shape({ batch, hidden }, 0, x.dtype)
      local c = c0 and c0:slice(1, d, d):squeeze(1) or full_like_shape({ batch, hidden }, 0, x.dtype)
      local Pd = P and P:slice(1, d, d):squeeze(1) or nil
      local out = {}
      for step = 1, seq do
        local t = reverse and seq - step + 1 or step
        local xt = x:slice(1, t, t):squeeze(1)
        if kind == "RNN" then
          h = (lin(xt, Wg[0], Wb[0]) + lin(h, Rg[0], Rb[0])):tanh()
        elseif kind == "GRU" then
          local z = (lin(xt, Wg[0], Wb[0]) + lin(h, Rg[0], Rb[0])):sigmoid()
          local r = (lin(xt, Wg[1], Wb[1]) + lin(h, Rg[1], Rb[1])):sigmoid()
          local hh
          if (a.linear_before_reset or 0) ~= 0 then
            hh = (lin(xt, Wg[2], Wb[2]) + r * lin(h, Rg[2], Rb[2])):tanh()
          else
            hh = (lin(xt, Wg[2], Wb[2]) + lin(r * h, Rg[2], Rb[2])):tanh()
          end
          h = (1 - z) * hh + z * h
        else
          -- gate order i, o, f, c; peepholes i, o, f
          local pi = lin(xt, Wg[0], Wb[0]) + lin(h, Rg[0], Rb[0])
          local pf = lin(xt, Wg[2], Wb[2]) + lin(h, Rg[2], Rb[2])
          if Pd then
            pi = pi + gate(Pd, 0) * c
            pf = pf + gate(Pd, 2) * c
          end
          local it, ft = pi:sigmoid(), pf:sigmoid()
          local ct = (lin(xt, Wg[3], Wb[3]) + lin(h, Rg[3], Rb[3])):tanh()
          c = ft * c + it * ct
          local po = lin(xt, Wg[1], Wb[1]) + lin(h, Rg[1], Rb[1])
          if Pd then po = po + gate(Pd, 1) * c end
          h = po:sigmoid() * c:tanh()
        end
        out[t] = h:unsqueeze(1)
      end
      ys[d] = cat(out, 0):unsqueeze(2) -- {seq, 1, batch, hidden}
      hs[d], cs[d] = h:unsqueeze(1), c:unsqueeze(1)
    end
    local Y, Yh, Yc = cat(ys, 1), cat(hs, 0), cat(cs, 0)
    if layout == 1 then
      Y = Y:permute({ 3, 1, 2, 4 }) -- {batch, seq, dir, hidden}
      Yh, Yc = Yh:transpose(1, 2), Yc:transpose(1, 2)
    end
    if kind == "LSTM" then return Y, Yh, Yc end
    return Y, Yh
  end
end
ops.RNN = recurrent("RNN")
ops.GRU = recurrent("GRU")
ops.LSTM = recurrent("LSTM")
