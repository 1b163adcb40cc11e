"""torch_profile.py: PyTorch's kernels, one by one, on a sample model: what
kiln's `:time` table is set against. Each CUDA kernel's mean time per call
over 50 calls of the compiled model (after warm-up), from torch.profiler.

  python3 bench/torch_profile.py transformer_block bf16 [mode]

mode is a torch.compile mode (default, reduce-overhead, max-autotune) or
eager; default: reduce-overhead."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from torch_models import build


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "transformer_block"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bf16"
    mode = sys.argv[3] if len(sys.argv) > 3 else "reduce-overhead"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m, x = build(name, dtype)
    f = m if mode == "eager" else torch.compile(m, mode=mode)
    calls = 50
    with torch.no_grad():
        for _ in range(10):
            f(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                f(x)
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
