"""torch_profile.py: PyTorch's kernels, one by one, on a sample model: what
kiln's `:time` table is set against. Each CUDA kernel's mean time per call
over 50 calls of the compiled model (after warm-up), from torch.profiler.

  python3 bench/torch_profile.py transformer_block bf16 [mode]

mode is a torch.compile mode (default, reduce-overhead, max-autotune) or
eager; default: reduce-overhead. A name of the real-model suite
(bench/real_models.py: resnet18, mobilenet_v3_large, ...) profiles that
model, built as the suite builds it."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import real_models
from torch_models import build


def build_any(name, dtype):
    """A sample (torch_models.build) or a model of the real-model suite, on
    the GPU in `dtype`, with its inputs."""
    if name not in real_models.SUITE:
        return build(name, dtype)
    m, x, _ = real_models.build(name)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    m = m.to("cuda", dt)
    x = tuple(t.to("cuda", dt) if t.is_floating_point() else t.to("cuda") for t in x)
    return m, x


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "transformer_block"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bf16"
    mode = sys.argv[3] if len(sys.argv) > 3 else "reduce-overhead"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m, x = build_any(name, dtype)
    args = x if isinstance(x, tuple) else (x,)
    f = m if mode == "eager" else torch.compile(m, mode=mode)
    calls = 50
    with torch.no_grad():
        for _ in range(10):
            f(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                f(*args)
            torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.device_time if hasattr(e, "device_time") else e.cuda_time
        r = rows.setdefault(e.name, [0, 0.0])
        r[0] += 1
        r[1] += us
    total = sum(v[1] for v in rows.values()) / calls
    print(f"== torch {name} {dtype} {mode}: {total:.1f} us of GPU kernels per call")
    for k, (n, us) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"{us / calls:9.1f} us  x{n / calls:4.1f}  {k[:110]}")


if __name__ == "__main__":
    main()
