"""Exports bench/torch_models.py's transformer_block to ONNX for kiln's ONNX
bench row (transformer_block_onnx in bench/gpu_bench.sh and kiln_bench.lua).

  python3 bench/export_onnx.py [OUT_DIR]      (default: $EXPORT_DIR, else .)

Writes to OUT_DIR:
  transformer_block.onnx            the f32 model, weights inside the file
  transformer_block.onnx.json       what happened: exporter, opset, op
                                    histogram, errors (also printed on stdout
                                    as one JSON line, side "env-onnx-export")
  transformer_block_onnx-f32.io.safetensors, ...-bf16.io.safetensors
                                    "input" (the benchmark's input, from
                                    build()) and "output" (PyTorch eager on it,
                                    the exported weights in f32, and rounded to
                                    bf16 as torch_models.py's bf16 row does).
                                    safetensors is raw little-endian data behind
                                    a JSON header of names, dtypes and shapes;
                                    kiln reads it with kiln.load_safetensors.

The weights come from torch.manual_seed(0) before build(), so every export
holds the same model. PyTorch 2.11's default exporter is the dynamo one
(torch.export + onnxscript); where it fails (onnxscript missing, an op it
cannot export) the TorchScript exporter (dynamo=False, opset 17) runs and
the status says why. kiln reads opsets up to 21 (kiln.onnx.max_opset): a
newer default is exported again at 21. With onnxruntime installed the file
is also run there and its error against PyTorch recorded (a check of the
export itself, apart from kiln). Exit status 0 when a file was written.
"""
import collections, copy, json, os, sys, time, traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402  build() and save_safetensors, shared with the benchmark

MODEL = "transformer_block"
ROW = "transformer_block_onnx"
KILN_MAX_OPSET = 21


def last_line(e):
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return (lines[-1] if lines else repr(e))[:400]


def default_opset(proto):
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def file_opset(prog, path):
    """The default-domain opset of the exported model (None if unknown)."""
    proto = getattr(prog, "model_proto", None)
    if proto is None:
        try:
            import onnx
            proto = onnx.load(path, load_external_data=False)
        except ImportError:
            return None
    return default_opset(proto)


def export(m, x, path, status):
    """Dynamo first, TorchScript second; returns the exporter's name."""
    import torch
    kw = dict(input_names=["x"], output_names=["y"])

    def dynamo(**more):
        try:  # weights inside the file (12 MiB); external_data= exists since PyTorch 2.6
            return torch.onnx.export(m, (x,), path, dynamo=True, external_data=False, **kw, **more)
        except TypeError as e:
            if "external_data" not in str(e):
                raise
            return torch.onnx.export(m, (x,), path, dynamo=True, **kw, **more)

    try:
        prog = dynamo()
        opset = file_opset(prog, path)
        if opset is not None and opset > KILN_MAX_OPSET:
            status["note"] = (f"the dynamo exporter's default opset {opset} is newer than kiln reads: "
                              f"exported again at {KILN_MAX_OPSET}")
            prog = dynamo(opset_version=KILN_MAX_OPSET)
            opset = file_opset(prog, path)
        status["opset"] = opset  # describe() reads it from the file again where onnx is installed
        return "dynamo"
    except Exception as e:  # noqa: BLE001  any failure: say it, try the other exporter
        status["dynamo_error"] = last_line(e)
        print(f"export_onnx: the dynamo exporter failed ({status['dynamo_error']}); trying dynamo=False",
              file=sys.stderr)
        for stale in (path, path + ".data"):
            if os.path.exists(stale):
                os.remove(stale)
    torch.onnx.export(m, (x,), path, dynamo=False, opset_version=17, do_constant_folding=True, **kw)
    return "torchscript"


def describe(path, status):
    """Opset and op histogram of the file (needs the onnx package)."""
    try:
        import onnx
    except ImportError:
        status["histogram_note"] = "the onnx package is missing: no op histogram"
        return
    proto = onnx.load(path)
    status["opset"] = default_opset(proto)
    hist = collections.Counter(n.op_type for n in proto.graph.node)
    status["ops"] = dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))
    status["nodes"] = len(proto.graph.node)
    status["initializers"] = len(proto.graph.initializer)


def check_onnxruntime(path, x, y, status):
    try:
        import onnxruntime as ort
    except ImportError:
        status["ort_note"] = "onnxruntime is missing: the export is not checked there"
        return
    try:
        import numpy as np  # onnxruntime needs numpy anyway
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(None, {sess.get_inputs()[0].name: x.detach().float().cpu().numpy()})[0]
        ref = y.detach().float().cpu().numpy()
        d = float(np.abs(got - ref).max())
        status["ort_max_abs_err"] = d
        status["ort_max_rel_err"] = d / float(np.abs(ref).max())
    except Exception as e:  # noqa: BLE001
        status["ort_error"] = last_line(e)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EXPORT_DIR", ".")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{MODEL}.onnx")
    status = {"side": "env-onnx-export", "model": MODEL, "row": ROW, "file": os.path.basename(path)}
    for stale in (path, path + ".data"):
        if os.path.exists(stale):
            os.remove(stale)
    t0 = time.time()
    try:
        import torch
        status["torch"] = torch.__version__
        torch.manual_seed(0)  # the weights: nn.Linear and nn.LayerNorm draw from the global generator
        m, x = torch_models.build(MODEL, "f32")
        status["input_shape"] = list(x.shape)
        with torch.inference_mode():
            y = m(x)
        for dtype in ("f32", "bf16"):
            # bf16: a copy rounded as torch_models.py's bf16 row (m itself stays f32 for the export)
            mm, xx = (m, x) if dtype == "f32" else (copy.deepcopy(m).to(torch.bfloat16), x.to(torch.bfloat16))
            with torch.inference_mode():
                yy = mm(xx)
            torch_models.save_safetensors(os.path.join(out, f"{ROW}-{dtype}.io.safetensors"),
                                          {"input": x, "output": yy},
                                          {"origin": "bench/export_onnx.py", "torch": torch.__version__})
        status["exporter"] = export(m, x, path, status)
        status["export_s"] = round(time.time() - t0, 2)
        status["bytes"] = os.path.getsize(path)
        describe(path, status)
        check_onnxruntime(path, x, y, status)
    except Exception as e:  # noqa: BLE001  the bench goes on; the row says why
        status["error"] = last_line(e)
        if os.path.exists(path):
            os.remove(path)
    with open(path + ".json", "w") as f:
        json.dump(status, f, indent=1)
    print(json.dumps(status), flush=True)
    what = (f"error: {status['error']}" if "error" in status else
            f"{status['exporter']} exporter, opset {status.get('opset') or '?'}, {status['bytes']} bytes")
    print(f"export_onnx: {path}: {what}", file=sys.stderr)
    if "ops" in status:
        print("export_onnx: ops: " + ", ".join(f"{k} {v}" for k, v in status["ops"].items()), file=sys.stderr)
    return 0 if "error" not in status else 1


if __name__ == "__main__":
    sys.exit(main())
