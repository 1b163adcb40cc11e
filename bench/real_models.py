"""PyTorch side of the real-model suite (bench/real_models.sh): torchvision
and Hugging Face models with seeded random weights, exported to ONNX with
PyTorch's dynamo exporter, their outputs in f32 and bf16, and PyTorch's
times in each torch.compile mode.

  python3 bench/real_models.py export DIR [NAME,...]   ONNX files and outputs
  python3 bench/real_models.py row NAME MODE DTYPE      one timed row, one JSON line
  python3 bench/real_models.py run                      MODELS x TORCH_MODES x DTYPES,
                                                        a process each, appended to $BENCH_JSONL
  python3 bench/real_models.py env                      versions and GPU (bench/torch_models.py's)

The suite (SUITE) is the models users bring; the tiny ones (TINY) are the
same families at a size CI can hold (t/data/real_models/, checked by
t/real_models.lua on the CPU).

export writes, per model, to DIR:
  NAME.onnx             the f32 model, weights inside the file, opset 18
  NAME.io.safetensors   the inputs, by the ONNX graph's input names, and
                        "output.f32" / "output.bf16": PyTorch eager on the
                        same weights (bf16: the model after .to(torch.bfloat16),
                        float inputs rounded to bf16), on the GPU, TF32 off
  NAME.onnx.json        what the export did: op histogram, Cast targets,
                        float constants, sizes (one JSON line on stdout too)

Weights: each model is built after torch.manual_seed(SEED) and then
randomized (randomize()): no parameter or buffer is left all zero (torchvision
zero-initializes ViT's head, which makes every output 0 and every comparison
meaningless), norm scales are drawn around 1 and batch-norm statistics are
drawn, so each op of the export changes the answer. A row rebuilds the same
weights from the same seed; its error against the exported output proves it.

Env: REPS (5), CALLS (100), WARMUP (10), REF_DIR (the export folder, for a
row's error), ROW_TIMEOUT (s, 240), MA_ROW_TIMEOUT (s, 420), BENCH_DEADLINE,
BENCH_JSONL, MODELS, TORCH_MODES, DTYPES (comma lists).
"""
import collections, copy, json, os, sys, time, traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402  safetensors by hand, the timer and env, shared with gpu_bench

SEED = 0
SUITE = ["resnet18", "resnet50", "mobilenet_v3_large", "vit_b_16", "bert", "bert_eager", "gpt2"]
TINY = ["resnet_tiny", "mobilenet_tiny", "vit_tiny", "bert_tiny", "gpt2_tiny"]
MODES = ["eager", "default", "reduce-overhead", "max-autotune"]
DTYPES = ["f32", "bf16"]
OPSET = 18


# ---- the models

def _hf_text(kind, layers, d, heads, ff, vocab, positions, attn, batch, seq):
    import torch, transformers as tr
    if kind == "bert":
        cfg = tr.BertConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=ff, max_position_embeddings=positions)
    else:
        cfg = tr.GPT2Config(vocab_size=vocab, n_embd=d, n_layer=layers, n_head=heads, n_inner=ff,
                            n_positions=positions, use_cache=False)
    cfg._attn_implementation = attn
    inner = (tr.BertModel if kind == "bert" else tr.GPT2Model)(cfg)

    class LastHidden(torch.nn.Module):
        """The hidden states alone: one output, as the suite compares."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask=None):
            if attention_mask is None:
                return self.m(input_ids=input_ids, use_cache=False).last_hidden_state
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    if kind == "bert":
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[-1, seq * 3 // 4:] = 0  # the last sequence is padded: the mask must matter
        return LastHidden(inner), (ids, mask), ["input_ids", "attention_mask"]
    return LastHidden(inner), (ids,), ["input_ids"]


def _tiny_resnet():
    import torch.nn as nn
    from torchvision.models.resnet import BasicBlock

    class TinyResNet(nn.Module):
        """torchvision's ResNet layout (7x7 stem, max pool, one BasicBlock a
        stage, strided 1x1 downsamples, global pool, fc) at widths 8-64."""

        def __init__(self, widths=(8, 16, 32, 64), classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
            blocks, c = [], widths[0]
            for i, w in enumerate(widths):
                stride = 1 if i == 0 else 2
                down = None
                if stride != 1 or c != w:
                    down = nn.Sequential(nn.Conv2d(c, w, 1, stride, bias=False), nn.BatchNorm2d(w))
                blocks.append(BasicBlock(c, w, stride, down))
                c = w
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(c, classes)

        def forward(self, x):
            return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))

    return TinyResNet()


def _tiny_mobilenet():
    from functools import partial
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3
    c = partial(InvertedResidualConfig, width_mult=1.0)
    setting = [  # input, kernel, expanded, output, SE, activation, stride, dilation
        c(16, 3, 16, 16, True, "RE", 2, 1),
        c(16, 3, 48, 24, False, "RE", 2, 1),
        c(24, 5, 72, 24, True, "HS", 1, 1),
        c(24, 5, 96, 40, True, "HS", 2, 1),
    ]
    return MobileNetV3(setting, last_channel=64, num_classes=10)


def build(name):
    """(module in f32 on the CPU, eval mode, inputs tuple, ONNX input names)."""
    import torch, torchvision
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED + 2)
    image = lambda n, s: (torch.randn(n, 3, s, s, generator=g),)  # noqa: E731
    if name in ("resnet18", "resnet50"):
        m, x = getattr(torchvision.models, name)(), image(32 if name == "resnet18" else 16, 224)
    elif name == "mobilenet_v3_large":
        m, x = torchvision.models.mobilenet_v3_large(), image(16, 224)
    elif name == "vit_b_16":
        m, x = torchvision.models.vit_b_16(), image(8, 224)
    elif name == "resnet_tiny":
        m, x = _tiny_resnet(), image(2, 64)
    elif name == "mobilenet_tiny":
        m, x = _tiny_mobilenet(), image(2, 64)
    elif name == "vit_tiny":
        m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                 hidden_dim=64, mlp_dim=128, num_classes=10)
        x = image(2, 32)
    elif name in ("bert", "bert_eager"):
        m, x, names = _hf_text("bert", 4, 768, 12, 3072, 30522, 512, "eager" if name == "bert_eager" else "sdpa", 8, 128)
        return randomize(m).eval(), x, names
    elif name == "gpt2":
        m, x, names = _hf_text("gpt2", 4, 768, 12, 3072, 50257, 1024, "sdpa", 8, 128)
        return randomize(m).eval(), x, names
    elif name == "bert_tiny":
        m, x, names = _hf_text("bert", 2, 64, 2, 128, 512, 64, "sdpa", 2, 16)
        return randomize(m).eval(), x, names
    elif name == "gpt2_tiny":
        m, x, names = _hf_text("gpt2", 2, 64, 2, 128, 512, 64, "sdpa", 2, 16)
        return randomize(m).eval(), x, names
    else:
        raise SystemExit(f"real_models.py: unknown model '{name}' (known: {', '.join(SUITE + TINY)})")
    return randomize(m).eval(), x, ["x"]


def randomize(m):
    """No float parameter or buffer stays all zero or all one: zeros (biases,
    ViT's head, class tokens) are drawn small, ones (norm scales) around 1,
    and batch norms get statistics of their own (a positive variance)."""
    import torch
    g = torch.Generator().manual_seed(SEED + 3)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
        for _, t in list(m.named_parameters()) + list(m.named_buffers()):
            if not t.is_floating_point() or t.numel() == 0:
                continue
            if bool((t == 0).all()):
                t.copy_(torch.randn(t.shape, generator=g) * 0.02)
            elif bool((t == 1).all()):
                t.copy_(1 + torch.randn(t.shape, generator=g) * 0.1)
    return m


# ---- export

def _summary(path, status):
    """What the file holds that a dtype conversion must handle."""
    import onnx
    from onnx import numpy_helper
    proto = onnx.load(path)
    name_of = {v: k for k, v in onnx.TensorProto.DataType.items()}
    status["opset"] = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    status["ops"] = dict(collections.Counter(n.op_type for n in proto.graph.node).most_common())
    status["nodes"] = len(proto.graph.node)
    status["initializers"] = collections.Counter(name_of[t.data_type] for t in proto.graph.initializer)
    casts, consts, cos = collections.Counter(), collections.Counter(), collections.Counter()
    for n in proto.graph.node:
        attrs = {a.name: a for a in n.attribute}
        if n.op_type == "Cast":
            casts[name_of[attrs["to"].i]] += 1
        elif n.op_type == "Constant" and "value" in attrs:
            t = attrs["value"].t
            consts[f"{name_of[t.data_type]}[{numpy_helper.to_array(t).size}]"] += 1
        elif n.op_type == "ConstantOfShape" and "value" in attrs:
            cos[name_of[attrs["value"].t.data_type]] += 1
    status["cast_to"], status["constants"], status["constant_of_shape"] = casts, consts, cos
    status["inputs"] = [(i.name, name_of[i.type.tensor_type.elem_type]) for i in proto.graph.input]


def export_one(name, out):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    path = os.path.join(out, f"{name}.onnx")
    status = {"side": "env-real-export", "model": name, "file": os.path.basename(path), "torch": torch.__version__}
    t0 = time.time()
    try:
        m, x, names = build(name)
        status["inputs_shape"] = [list(t.shape) for t in x]
        status["params"] = sum(p.numel() for p in m.parameters())
        io = {n: t for n, t in zip(names, x)}
        with torch.inference_mode():
            for dt in DTYPES:
                mm = copy.deepcopy(m).cuda()
                xx = [t.cuda() for t in x]
                if dt == "bf16":
                    mm = mm.to(torch.bfloat16)
                    xx = [t.to(torch.bfloat16) if t.is_floating_point() else t for t in xx]
                io[f"output.{dt}"] = mm(*xx).detach().cpu()
                if dt == "f32":  # the f32 rows' float64 reference: the same weights and inputs in float64
                    m64 = copy.deepcopy(m).cuda().double()
                    io["output.f64"] = m64(*[t.double() if t.is_floating_point() else t for t in xx]).detach().cpu()
        torch_models.save_safetensors(os.path.join(out, f"{name}.io.safetensors"), io,
                                      {"origin": "bench/real_models.py", "torch": torch.__version__, "seed": SEED})
        t1 = time.time()
        torch.onnx.export(m, x, path, dynamo=True, opset_version=OPSET, external_data=False,
                          input_names=names, output_names=["y"])
        status["export_s"] = round(time.time() - t1, 2)
        status["bytes"] = os.path.getsize(path)
        _summary(path, status)
        ref = io["output.f32"].float()
        status["output_absmax"] = float(ref.abs().max())
        if not status["output_absmax"] > 0:
            status["error"] = "PyTorch's f32 output is all zero: the comparison would be meaningless"
    except Exception as e:  # noqa: BLE001  the next model goes on; the status says why
        status["error"] = "".join(traceback.format_exception_only(type(e), e)).strip()[-600:]
    status["total_s"] = round(time.time() - t0, 2)
    with open(path + ".json", "w") as f:
        json.dump(status, f, indent=1)
    print(json.dumps(status), flush=True)
    print(f"real_models: export {name}: {status.get('error') or str(status['bytes']) + ' bytes'} "
          f"({status['total_s']} s)", file=sys.stderr, flush=True)


# ---- timing

def _held_bytes(base_free):
    import torch
    free, _ = torch.cuda.mem_get_info()
    return base_free - free


def row(name, mode, dtype):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    reps, calls, warmup = (int(os.environ.get(k, d)) for k, d in (("REPS", 5), ("CALLS", 100), ("WARMUP", 10)))
    torch.zeros(1, device="cuda")  # the context, before the baseline
    torch.cuda.synchronize()
    base_free, _ = torch.cuda.mem_get_info()
    m, x, _ = build(name)
    m = m.cuda()
    x = tuple(t.cuda() for t in x)
    if dtype == "bf16":
        m = m.to(torch.bfloat16)
        x = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in x)
    r = {"side": "torch", "model": name, "mode": mode, "dtype": dtype, "torch": torch.__version__,
         "input_shape": [list(t.shape) for t in x], "reps": reps, "calls": calls, "warmup": warmup}
    with torch.inference_mode():
        f = m if mode == "eager" else torch.compile(m, mode=None if mode == "default" else mode)
        torch.cuda.reset_peak_memory_stats()
        first, per, y_first, y_last = torch_models.time_calls(lambda a: f(*a), x, torch.cuda.synchronize,
                                                              time.perf_counter, reps, calls, warmup)
        torch.cuda.synchronize()
        # the same measure as kiln's row: device memory the process holds
        # after the calls, over what it held before loading (the caching
        # allocator keeps its peak, the CUDA-graph pool, cuDNN/cuBLAS
        # workspaces and loaded kernels), and the allocator's own figures
        r["held_mib"] = round(_held_bytes(base_free) / 2**20, 1)
        r["peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        r["reserved_mib"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
    r.update({"first_call_s": round(first, 4), "ms_per_call": round(torch_models._median(per), 5),
              "ms_min": round(min(per), 5), "ms_reps": [round(p, 5) for p in per]})
    ref_dir = os.environ.get("REF_DIR")
    io_path = os.path.join(ref_dir, f"{name}.io.safetensors") if ref_dir else None
    if io_path and os.path.exists(io_path):
        io = torch_models.load_safetensors(io_path)
        ref = io[f"output.{dtype}"]
        for key, y in (("", y_last), ("first_", y_first)):
            r[key + "max_abs_err"], r[key + "max_rel_err"] = torch_models._errors(y, ref)
        if dtype == "f32" and "output.f64" in io:
            r["f64_max_abs_err"], r["f64_max_rel_err"] = torch_models._errors(y_last, io["output.f64"], "float64")
        r["ref"] = "torch-eager"
    return r


def run():
    torch_models.run_rows(os.path.abspath(__file__), os.environ.get("MODELS", ",".join(SUITE)).split(","),
                          os.environ.get("TORCH_MODES", ",".join(MODES)).split(","),
                          os.environ.get("DTYPES", ",".join(DTYPES)).split(","),
                          float(os.environ.get("ROW_TIMEOUT", "240")), float(os.environ.get("MA_ROW_TIMEOUT", "420")))


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "export" and len(sys.argv) in (3, 4):
        os.makedirs(sys.argv[2], exist_ok=True)
        for n in (sys.argv[3].split(",") if len(sys.argv) == 4 else SUITE):
            export_one(n, sys.argv[2])
    elif cmd == "row" and len(sys.argv) == 5:
        print(json.dumps(row(*sys.argv[2:])), flush=True)
    elif cmd == "env":
        print(json.dumps(torch_models.env()), flush=True)
    elif cmd == "run":
        run()
    else:
        sys.exit(__doc__)
