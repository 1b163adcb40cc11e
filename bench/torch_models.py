"""PyTorch side of bench/gpu_bench.sh: the five workloads of samples/,
their reference export for kiln, and the timer.

build() is copied from ../shared/bench/torch_models.py (the definitions that
measured the design's anchor numbers and that kiln's samples match); keep it
identical to that file. The rest replaces that file's driver so that PyTorch
and kiln are timed the same way (bench/kiln_bench.lua mirrors time_calls).

  python3 bench/torch_models.py row MODEL MODE DTYPE   one row, one JSON line
  python3 bench/torch_models.py run                    rows of MODELS x TORCH_MODES x DTYPES,
                                                       one process each, appended to $BENCH_JSONL
  python3 bench/torch_models.py env                    one JSON line: versions and GPU

Env: REPS (5), CALLS (100), WARMUP (10); EXPORT_DIR: where the eager row
writes MODEL-DTYPE.weights.safetensors (the state_dict, PyTorch names) and
MODEL-DTYPE.io.safetensors ("input", "output" of the eager model), which
kiln_bench.lua loads; ROW_TIMEOUT (s per row; MA_ROW_TIMEOUT for
max-autotune rows), BENCH_DEADLINE (epoch seconds:
rows that would start after it are recorded as skipped).

Each (model, mode, dtype) runs in its own process so compile caches and
CUDA-graph pools do not leak between rows.
"""
import ctypes, json, math, os, struct, subprocess, sys, time

MODELS = ["simple_linear", "large_linear", "convnet", "transformer_block", "gcn"]
MODES = ["eager", "default", "reduce-overhead", "max-autotune"]
DTYPES = ["f32", "bf16"]


# ---- copied from ../shared/bench/torch_models.py (do not edit here) ----
def build(name, dtype):
    import torch, torch.nn as nn, torch.nn.functional as F
    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(0)
    if name == "simple_linear":
        m = nn.Linear(1024, 1024)
        x = torch.randn(32, 1024, generator=g)
    elif name == "large_linear":
        layers = []
        for _ in range(4):
            layers += [nn.Linear(4096, 4096), nn.ReLU()]
        m = nn.Sequential(*layers)
        x = torch.randn(64, 4096, generator=g)
    elif name == "convnet":
        def blk(i, o):
            return [nn.Conv2d(i, o, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]
        m = nn.Sequential(*blk(3, 32), *blk(32, 64), *blk(64, 128), *blk(128, 256),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000))
        x = torch.randn(32, 3, 224, 224, generator=g)
    elif name == "transformer_block":
        class Block(nn.Module):
            def __init__(s, d=512, h=8, f=2048):
                super().__init__()
                s.h = h
                s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                s.fc1, s.fc2 = nn.Linear(d, f), nn.Linear(f, d)
            def forward(s, x):
                B, T, D = x.shape
                q, k, v = s.qkv(s.ln1(x)).split(D, dim=-1)
                q = q.view(B, T, s.h, D // s.h).transpose(1, 2)
                k = k.view(B, T, s.h, D // s.h).transpose(1, 2)
                v = v.view(B, T, s.h, D // s.h).transpose(1, 2)
                att = (q @ k.transpose(-2, -1)) * (1.0 / (D // s.h) ** 0.5)
                mask = torch.ones(T, T, device=x.device, dtype=torch.bool).tril()
                att = att.masked_fill(~mask, float("-inf")).softmax(-1)
                y = (att @ v).transpose(1, 2).reshape(B, T, D)
                x = x + s.proj(y)
                return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))
        m = Block()
        x = torch.randn(16, 256, 512, generator=g)
    elif name == "gcn":
        N, Fin, H, C, E = 2708, 1433, 16, 7, 10556
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
                s.register_buffer("src", src); s.register_buffer("dst", dst)
                s.register_buffer("norm", norm)
            def prop(s, h):
                msg = h[s.src] * s.norm[:, None].to(h.dtype)
                return torch.zeros_like(h).index_add_(0, s.dst, msg)
            def forward(s, x):
                h = F.relu(s.prop(s.l1(x)))
                return s.prop(s.l2(h)).log_softmax(-1)
        m = GCN()
        x = (torch.rand(N, Fin, generator=g) < 0.02).float()
    m = m.to(dev).eval()
    x = x.to(dev)
    if dtype == "bf16":
        m = m.to(torch.bfloat16)
        x = x.to(torch.bfloat16)
    return m, x
# ---- end of the copy ----


# ---- safetensors by hand: the `safetensors` package may be missing on the GPU machine

def _st_names():
    import torch
    return {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
            torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}


def save_safetensors(path, tensors, metadata=None):
    """tensors: name -> torch tensor (any device). Raw little-endian bytes
    are read from a contiguous CPU copy through its data pointer, so no numpy
    is needed and bf16 keeps its exact bits."""
    names = _st_names()
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous().clone()
        n = t.numel() * t.element_size()
        blobs.append(ctypes.string_at(t.data_ptr(), n) if n else b"")
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the format recommends 8-byte alignment of the data
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_safetensors(path):
    import torch
    dts = {v: k for k, v in _st_names().items()}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = dts[e["dtype"]]
        if end > b:
            t = torch.frombuffer(bytearray(data[b:end]), dtype=dt)
        else:
            t = torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"])
    return out


# ---- one row

def _env_int(name, default):
    return int(os.environ.get(name, default))


def _median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _errors(y, ref, at="float32"):
    """Max abs difference and that over the largest |ref|, computed in `at`
    ("float64" against a float64 reference)."""
    import torch
    dt = getattr(torch, at)
    a, b = y.detach().to(dt).cpu(), ref.detach().to(dt).cpu()
    if a.shape != b.shape:
        return None, None
    d = (a - b).abs().max().item()
    scale = b.abs().max().item()
    return d, (d / scale if scale > 0 else d)


def time_calls(f, x, sync, clock, reps, calls, warmup):
    """The method shared with kiln_bench.lua: one cold first call (compile
    included), `warmup` calls, then `reps` repetitions of `calls`
    back-to-back calls with a device sync after each repetition; ms per call
    is the median over the repetitions."""
    sync()
    t0 = clock()
    y = f(x)
    sync()
    first = clock() - t0
    y_first = y.detach().float().cpu()  # copied now: CUDA-graph outputs are overwritten by later calls
    for _ in range(warmup):
        f(x)
    sync()
    per = []
    for _ in range(reps):
        t0 = clock()
        for _ in range(calls):
            f(x)
        sync()
        per.append((clock() - t0) / calls * 1e3)
    y = f(x)
    sync()
    return first, per, y_first, y.detach().float().cpu()


def row(name, mode, dtype):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    reps, calls, warmup = _env_int("REPS", 5), _env_int("CALLS", 100), _env_int("WARMUP", 10)
    torch.zeros(1, device="cuda")  # the context, before the baseline of held_mib
    torch.cuda.synchronize()
    base_free, _ = torch.cuda.mem_get_info()
    m, x = build(name, dtype)
    r = {"side": "torch", "model": name, "mode": mode, "dtype": dtype, "input_shape": list(x.shape),
         "torch": torch.__version__, "reps": reps, "calls": calls, "warmup": warmup}
    exp = os.environ.get("EXPORT_DIR")
    weights = os.path.join(exp, f"{name}-{dtype}.weights.safetensors") if exp else None
    if mode != "eager" and weights and os.path.exists(weights):
        # build() seeds the input, not the layers' initialization, so each
        # process (one a row) draws other weights: the compiled rows were
        # compared with eager's output on different weights (relative
        # errors near 1 in the 2026-11-25 runs). The exported ones it is.
        m.load_state_dict(load_safetensors(weights))
        r["weights"] = "torch-eager's export"
    with torch.inference_mode():
        if mode == "eager" and exp:
            # the reference kiln is checked against: PyTorch eager on these weights and this input
            os.makedirs(exp, exist_ok=True)
            y = m(x)
            torch.cuda.synchronize()
            io = {"input": x, "output": y}
            if dtype == "f32":
                # the float64 reference of the f32 rows' accuracy column:
                # the same weights and input, computed in float64
                import copy
                io["output_f64"] = copy.deepcopy(m).double()(x.double())
            save_safetensors(os.path.join(exp, f"{name}-{dtype}.weights.safetensors"), m.state_dict(),
                             {"origin": "bench/torch_models.py", "torch": torch.__version__})
            save_safetensors(os.path.join(exp, f"{name}-{dtype}.io.safetensors"), io,
                             {"origin": "bench/torch_models.py", "torch": torch.__version__})
            r["exported"] = True
        f = m if mode == "eager" else torch.compile(m, mode=None if mode == "default" else mode)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        first, per, y_first, y_last = time_calls(f, x, torch.cuda.synchronize, time.perf_counter,
                                                 reps, calls, warmup)
        r["peak_first_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        # the steady-state peak, as kiln's: one more call after a reset
        torch.cuda.reset_peak_memory_stats()
        f(x)
        torch.cuda.synchronize()
        r["peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        # as kiln's row: device memory the process holds now over what it
        # held before building the model (the caching allocator's blocks,
        # the CUDA-graph pool, library workspaces, loaded kernels)
        r["held_mib"] = round((base_free - torch.cuda.mem_get_info()[0]) / 2**20, 1)
    r.update({"first_call_s": round(first, 4), "ms_per_call": round(_median(per), 5),
              "ms_min": round(min(per), 5), "ms_reps": [round(p, 5) for p in per]})
    io_path = os.path.join(exp, f"{name}-{dtype}.io.safetensors") if exp else None
    if io_path and os.path.exists(io_path):
        io = load_safetensors(io_path)
        ref = io["output"]
        for key, y in (("", y_last), ("first_", y_first)):
            a, rel = _errors(y, ref)
            r[key + "max_abs_err"], r[key + "max_rel_err"] = a, rel
        if "output_f64" in io:
            r["f64_max_abs_err"], r["f64_max_rel_err"] = _errors(y_last, io["output_f64"], "float64")
        r["ref"] = "torch-eager"
    return r


def env():
    import torch
    r = {"side": "env-torch", "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version(), "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        r.update({"gpu": p.name, "gpu_memory_mib": p.total_memory // 2**20, "sm_count": p.multi_processor_count,
                  "cc": f"{p.major}.{p.minor}"})
    else:
        r["gpu"] = None
    return r


def run_rows(script, models, modes, dtypes, row_timeout, ma_timeout):
    """Rows of models x modes x dtypes, each `script row MODEL MODE DTYPE` in
    its own process with a timeout, printed and appended to $BENCH_JSONL as
    each finishes; rows that would start after $BENCH_DEADLINE are recorded
    as skipped. A mode at a time: a cut-off run still has the cheap modes
    for every model. Shared with bench/real_models.py."""
    deadline = float(os.environ.get("BENCH_DEADLINE", "inf"))
    out_path = os.environ.get("BENCH_JSONL")
    out = open(out_path, "a") if out_path else None
    for md in modes:
        for mo in models:
            for dt in dtypes:
                left = deadline - time.time()
                base = {"side": "torch", "model": mo, "mode": md, "dtype": dt}
                t0 = time.time()
                if left < 10:
                    line = json.dumps(dict(base, skipped="bench time budget spent"))
                else:
                    try:
                        limit = min(ma_timeout if md.startswith("max-autotune") else row_timeout, left)
                        p = subprocess.run([sys.executable, script, "row", mo, md, dt],
                                           capture_output=True, text=True, timeout=limit)
                        last = p.stdout.strip().splitlines()[-1:] if p.returncode == 0 else []
                        line = last[0] if last else json.dumps(
                            dict(base, error=(p.stderr.strip() or p.stdout.strip())[-600:]))
                    except subprocess.TimeoutExpired:
                        line = json.dumps(dict(base, error=f"timeout after {limit:.0f} s"))
                r = json.loads(line) if line.startswith("{") else {}
                what = (f"{r['ms_per_call']} ms" if "ms_per_call" in r else
                        (r.get("error") or r.get("skipped") or "no result").strip().splitlines()[-1][:120])
                print(f"torch {mo} {md} {dt}: {time.time() - t0:.1f} s, {what}", file=sys.stderr, flush=True)
                print(line, flush=True)
                if out:
                    out.write(line + "\n")
                    out.flush()


def run():
    # NAME_onnx rows are kiln's (an ONNX file of NAME): PyTorch's side is NAME's row
    models = [m for m in os.environ.get("MODELS", ",".join(MODELS)).split(",") if not m.endswith("_onnx")]
    modes = os.environ.get("TORCH_MODES", ",".join(MODES)).split(",")
    dtypes = os.environ.get("DTYPES", ",".join(DTYPES)).split(",")
    run_rows(os.path.abspath(__file__), models, modes, dtypes, float(os.environ.get("ROW_TIMEOUT", "150")),
             float(os.environ.get("MA_ROW_TIMEOUT", "240")))  # max-autotune's compile alone took 95 s a row


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "run"
    if cmd == "row" and len(sys.argv) == 5:
        print(json.dumps(row(*sys.argv[2:])), flush=True)
    elif cmd == "env":
        print(json.dumps(env()), flush=True)
    elif cmd == "run":
        run()
    else:
        sys.exit(__doc__)
