"""PyTorch side of bench/train_bench.sh: the three training samples of
samples/ (train_gcn.lua, train_convnet.lua, train_transformer.lua) as
PyTorch models, trained and timed step by step the way kiln_train.lua does.

  python3 bench/torch_train.py row SAMPLE MODE DTYPE   one row, one JSON line on stdout
  python3 bench/torch_train.py reference OUTDIR        CI's loss curves (below)
  python3 bench/torch_train.py profile SAMPLE MODE DTYPE  PyTorch's kernels, one by one

SAMPLE is gcn, convnet or transformer; MODE eager, default or
reduce-overhead (torch.compile of the model and of the optimizer step in
that mode); DTYPE f32 or bf16 (bf16 = torch.autocast, f32 master weights,
as kiln.autocast).

A row: the model from PyTorch's own initialization (seed 0), one fixed
batch, AdamW as the sample has it. Steps 1-STEPS (100) run one at a time
and their losses are the loss curve (the first step, compile included, is
timed alone); then REPS (5) repetitions of CALLS (50) back-to-back steps
with a sync after each repetition: ms a step is their median. Peak memory
is the allocator's peak over the whole process (weights, optimizer state,
activations and CUDA-graph pools), as kiln_train.lua reads kiln's.

With EXPORT_DIR set, the eager row writes what kiln needs to start from
the same place: train_SAMPLE.weights.safetensors (the initial state_dict,
f32, PyTorch's names) and train_SAMPLE-DTYPE.io.safetensors (the batch and
the eager loss curve, "losses"). kiln_train.lua checks its curve against it.

`reference` writes, for t/train_curves.sh (CI, no PyTorch there), the
small sizes on the CPU in f32 from deterministic weights that both sides
compute from a formula (formula_init), so the committed files hold only the
batch and the losses: OUTDIR/SAMPLE.safetensors.
"""
import json, math, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import _median, _env_int, save_safetensors  # noqa: E402

SAMPLES = ["gcn", "convnet", "transformer"]
MODES = ["eager", "default", "reduce-overhead"]
DTYPES = ["f32", "bf16"]


def build(name, small, dev):
    """The sample's model (train mode, f32), its batch (inputs and targets
    as PyTorch indexes them: classes and tokens from 0), the loss and the
    optimizer's settings. Mirrors samples/train_NAME.lua."""
    import torch, torch.nn as nn, torch.nn.functional as F
    g = torch.Generator(device="cpu").manual_seed(0)
    torch.manual_seed(0)
    if name == "gcn":
        N, Fin, H, C, E = (200, 1433, 16, 7, 780) if small else (2708, 1433, 16, 7, 10556)
        src = torch.randint(0, N, (E,), generator=g)
        dst = torch.randint(0, N, (E,), generator=g)
        loops = torch.arange(N)
        src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
        deg = torch.zeros(N).index_add_(0, dst, torch.ones(dst.numel()))
        norm = deg[src].rsqrt() * deg[dst].rsqrt()

        class GCN(nn.Module):
            def __init__(s):
                super().__init__()
                s.l1, s.l2 = nn.Linear(Fin, H), nn.Linear(H, C)
                s.register_buffer("src", src)
                s.register_buffer("dst", dst)
                s.register_buffer("norm", norm)

            def prop(s, h):
                msg = h[s.src] * s.norm[:, None].to(h.dtype)
                return torch.zeros_like(h).index_add_(0, s.dst, msg)

            def forward(s, x):
                h = F.relu(s.prop(s.l1(x)))
                return s.prop(s.l2(h)).log_softmax(-1)

        m = GCN()
        x = (torch.rand(N, Fin, generator=g) < 0.02).float()
        y = torch.randint(0, C, (N,), generator=g)
        loss = F.nll_loss
        opt = dict(lr=1e-2, weight_decay=5e-4)
    elif name == "convnet":
        def blk(i, o):
            return [nn.Conv2d(i, o, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]
        m = nn.Sequential(*blk(3, 32), *blk(32, 64), *blk(64, 128), *blk(128, 256),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000))
        n, hw = (2, 32) if small else (32, 224)
        x = torch.randn(n, 3, hw, hw, generator=g)
        y = torch.randint(0, 1000, (n,), generator=g)
        loss = F.cross_entropy
        opt = dict(lr=1e-3)
    elif name == "transformer":
        V = 1000
        D, Hh, FF, B, T = (64, 4, 256, 2, 16) if small else (512, 8, 2048, 16, 256)

        class Block(nn.Module):  # samples/transformer_block.lua
            def __init__(s, d, h, f):
                super().__init__()
                s.h = h
                s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                s.fc1, s.fc2 = nn.Linear(d, f), nn.Linear(f, d)

            def forward(s, x):
                Bx, Tx, Dx = x.shape
                q, k, v = s.qkv(s.ln1(x)).split(Dx, dim=-1)
                q = q.view(Bx, Tx, s.h, Dx // s.h).transpose(1, 2)
                k = k.view(Bx, Tx, s.h, Dx // s.h).transpose(1, 2)
                v = v.view(Bx, Tx, s.h, Dx // s.h).transpose(1, 2)
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(Dx // s.h))
                mask = torch.ones(Tx, Tx, device=x.device, dtype=torch.bool).tril()
                att = att.masked_fill(~mask, float("-inf")).softmax(-1)
                yy = (att @ v).transpose(1, 2).reshape(Bx, Tx, Dx)
                x = x + s.proj(yy)
                return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))

        class TinyLM(nn.Module):  # samples/train_transformer.lua
            def __init__(s):
                super().__init__()
                s.embed = nn.Embedding(V, D)
                s.block = Block(D, Hh, FF)
                s.ln = nn.LayerNorm(D)
                s.head = nn.Linear(D, V)

            def forward(s, tokens):
                return s.head(s.ln(s.block(s.embed(tokens))))

        m = TinyLM()
        seq = torch.randint(0, V, (B, T + 1), generator=g)
        x, y = seq[:, :T].contiguous(), seq[:, 1:].contiguous()

        def loss(logits, t):
            return F.cross_entropy(logits.reshape(-1, V), t.reshape(-1))
        opt = dict(lr=3e-4)
    else:
        raise SystemExit(f"torch_train.py: unknown sample {name!r} (one of {', '.join(SAMPLES)})")
    return m.to(dev).train(), x.to(dev), y.to(dev), loss, opt


def formula_init(m):
    """Deterministic weights both sides compute the same way (float64, then
    rounded to f32): w[i] = s * sin(0.61803 i + phase(name)), phase = 0.01 x
    the sum of the name's bytes; s = 1 / sqrt(fan_in) for matrices and
    kernels (fan_in = numel / rows), 0.1 for vectors, plus 1 for a norm's
    weight. t/lib/train_curves.lua has the same function in Lua."""
    import torch
    with torch.no_grad():
        for name, p in m.named_parameters():
            phase = 0.01 * sum(name.encode())
            i = torch.arange(p.numel(), dtype=torch.float64)
            w = torch.sin(i * 0.61803 + phase)
            if p.dim() >= 2:
                w = w * (1.0 / math.sqrt(p.numel() // p.shape[0]))
            else:
                w = w * 0.1
                if name.endswith("weight"):
                    w = w + 1.0
            p.copy_(w.to(torch.float32).reshape(p.shape))


def step_fns(m, x, y, loss_fn, opt_args, mode, dtype):
    """One training step as a function returning the loss (a device
    tensor), in the mode asked for."""
    import torch
    opt = torch.optim.AdamW(m.parameters(), **opt_args)
    model = m if mode == "eager" else torch.compile(m, mode=mode)
    autocast = dtype == "bf16"

    def update():
        opt.step()
    update_c = update if mode == "eager" else torch.compile(update, mode=mode)
    graphs = mode == "reduce-overhead"

    def step():
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(x), y)
        loss.backward()
        update_c()
        return loss.detach()
    return step


def row(name, mode, dtype):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    steps, reps, calls = _env_int("STEPS", 100), _env_int("REPS", 5), _env_int("CALLS", 50)
    m, x, y, loss_fn, opt_args = build(name, False, "cuda")
    exp = os.environ.get("EXPORT_DIR")
    if exp and mode == "eager":
        os.makedirs(exp, exist_ok=True)
        save_safetensors(os.path.join(exp, f"train_{name}.weights.safetensors"),
                         {k: v.detach().float() if v.is_floating_point() else v for k, v in m.state_dict().items()},
                         {"sample": name})
    step = step_fns(m, x, y, loss_fn, opt_args, mode, dtype)
    sync = torch.cuda.synchronize
    sync()
    t0 = time.perf_counter()
    losses = [step().float().item()]
    first = time.perf_counter() - t0
    for _ in range(steps - 1):
        losses.append(step().float().item())
    if exp and mode == "eager":
        save_safetensors(os.path.join(exp, f"train_{name}-{dtype}.io.safetensors"),
                         {"x": x, "y": y, "losses": torch.tensor(losses, dtype=torch.float64)},
                         {"sample": name, "dtype": dtype})
    per = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        per.append((time.perf_counter() - t0) / calls * 1e3)
    return {
        "side": "torch", "sample": name, "mode": mode, "dtype": dtype, "torch": torch.__version__,
        "steps": steps, "reps": reps, "calls": calls,
        "first_step_s": round(first, 4), "ms_per_step": round(_median(per), 5),
        "ms_reps": [round(v, 5) for v in per],
        "loss_first": losses[0], "loss_last": losses[-1], "losses": losses,
        "nan": any(v != v for v in losses),
        "peak_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 2),
        "peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 2),
    }


def profile_row(name, mode, dtype):
    """PyTorch's kernels in one training step, as kiln's `:time` lists its
    own (bench/profile_train.lua): each CUDA kernel's mean time a step over
    PROFILE_STEPS (20) steps, after 20 unprofiled ones (compile, warm-up),
    largest first, with the step's total device time."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    m, x, y, loss_fn, opt_args = build(name, False, "cuda")
    step = step_fns(m, x, y, loss_fn, opt_args, mode, dtype)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    n = _env_int("PROFILE_STEPS", 20)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    def device_us(e):
        return getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
    rows = [(e.key, e.count, device_us(e)) for e in prof.key_averages()
            if device_us(e) > 0 and getattr(e, "device_type", None) != torch.autograd.DeviceType.CPU]
    rows.sort(key=lambda r: -r[2])
    total = sum(r[2] for r in rows) / n
    print(f"== torch {name} {dtype} {mode}: {total:.1f} us of kernels a step, "
          f"{sum(r[1] for r in rows) / n:.0f} kernels a step")
    for key, count, t in rows:
        print(f"{t / n:9.1f} us  {count / n:5.1f}x  {key[:110]}")


def reference(outdir):
    """CI's loss curves: the small sizes, CPU, f32, formula weights, 100
    eager steps (see formula_init)."""
    import torch
    torch.use_deterministic_algorithms(True)
    os.makedirs(outdir, exist_ok=True)
    for name in SAMPLES:
        m, x, y, loss_fn, opt_args = build(name, True, "cpu")
        formula_init(m)
        step = step_fns(m, x, y, loss_fn, opt_args, "eager", "f32")
        losses = [step().item() for _ in range(_env_int("STEPS", 100))]
        tensors = {"losses": torch.tensor(losses, dtype=torch.float64), "y": y}
        tensors["x"] = x.bool() if name == "gcn" else x  # gcn's features are 0/1: a quarter of the bytes
        if name == "gcn":
            for b in ("src", "dst", "norm"):
                tensors[b] = getattr(m, b)
        save_safetensors(os.path.join(outdir, f"{name}.safetensors"), tensors,
                         {"sample": name, "torch": torch.__version__, "steps": str(len(losses))})
        print(f"{name}: loss {losses[0]:.6f} -> {losses[-1]:.6f} in {len(losses)} steps", file=sys.stderr)


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "row":
        name, mode, dtype = sys.argv[2:5]
        if mode not in MODES or dtype not in DTYPES:
            raise SystemExit(f"torch_train.py: mode is one of {MODES}, dtype one of {DTYPES}")
        try:
            r = row(name, mode, dtype)
        except Exception as e:  # a row that fails is a row with its error, not a lost run
            r = {"side": "torch", "sample": name, "mode": mode, "dtype": dtype,
                 "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
        print(json.dumps(r), flush=True)
    elif len(sys.argv) >= 5 and sys.argv[1] == "profile":
        profile_row(*sys.argv[2:5])
    elif len(sys.argv) == 3 and sys.argv[1] == "reference":
        reference(sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
