"""torch_attention.py: PyTorch's F.scaled_dot_product_attention at the
shapes of bench/attention_kernels.lua (BERT with a padding mask, GPT-2
causal, ViT unmasked, the transformer_block sample), microseconds per call
from CUDA events over 200 back-to-back calls (median of 5), with the
backend PyTorch picks. TF32 off.

  python3 bench/torch_attention.py [bf16|f32|f16]"""
import sys

import torch
import torch.nn.functional as F

DT = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}
CASES = [
    ("bert 8x12x128x64 mask B11T", 8, 12, 128, 64, "pad"),
    ("gpt2 8x12x128x64 causal", 8, 12, 128, 64, "causal"),
    ("vit 8x12x197x64", 8, 12, 197, 64, None),
    ("block 16x8x256x64", 16, 8, 256, 64, None),
]


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    dt = DT[name]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    for label, b, h, t, d, kind in CASES:
        q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=dt, generator=g) for _ in range(3))
        kw = {}
        if kind == "causal":
            kw["is_causal"] = True
        if kind == "pad":
            m = torch.zeros(b, 1, 1, t, device="cuda", dtype=dt)
            m[-1, :, :, t * 3 // 4:] = -1e4
            kw["attn_mask"] = m
        for _ in range(10):
            F.scaled_dot_product_attention(q, k, v, **kw)
        times = []
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(200):
                F.scaled_dot_product_attention(q, k, v, **kw)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) * 1000 / 200)
        us = sorted(times)[2]
        flops = 4.0 * b * h * t * t * d * (0.5 if kind == "causal" else 1)
        print(f"{label:28s} {name:5s} {us:8.1f} us  {flops / us / 1e6:7.1f} TFLOP/s  (torch)")


if __name__ == "__main__":
    main()
