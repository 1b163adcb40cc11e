"""Checks the models bench/onnx_export_samples.lua wrote with kiln.onnx.save
in the ONNX tools themselves: onnx.checker (full check, with shape
inference) and onnxruntime, whose outputs are compared with kiln's.

  build/kiln bench/onnx_export_samples.lua /tmp/kiln_onnx
  python3 bench/onnx_export_check.py /tmp/kiln_onnx [--rtol 1e-3] [--atol 1e-4]

Prints one line per model and exits 1 if any check fails. Needs onnx,
onnxruntime and numpy; the .io.safetensors files are read with numpy alone.
"""
import argparse, glob, json, os, struct, sys

import numpy as np
import onnx
import onnxruntime as ort

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32,
          "I64": np.int64, "BOOL": np.bool_, "U8": np.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in DTYPES:
            raise SystemExit(f"{path}: tensor {name} has dtype {info['dtype']}, which this script does not read")
        lo, hi = info["data_offsets"]
        a = np.frombuffer(data[base + lo:base + hi], dtype=DTYPES[info["dtype"]])
        out[name] = a.reshape(info["shape"])
    return out


def check(model_path, rtol, atol):
    name = os.path.basename(model_path)[:-len(".onnx")]
    io_path = model_path[:-len(".onnx")] + ".io.safetensors"
    try:
        onnx.checker.check_model(model_path, full_check=True)
    except Exception as e:  # the checker's own exception types vary by version
        return False, f"{name}: onnx.checker FAILED: {str(e).splitlines()[0]}"
    tensors = read_safetensors(io_path)
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    feeds = {i.name: tensors["input." + i.name] for i in sess.get_inputs()}
    outs = sess.run(None, feeds)
    worst, ok = 0.0, True
    for o, got in zip(sess.get_outputs(), outs):
        want = tensors["output." + o.name]
        if got.shape != want.shape:
            return False, f"{name}: output {o.name} has shape {got.shape}, kiln's {want.shape}"
        g, w = got.astype(np.float64), want.astype(np.float64)
        if np.isnan(g).any() != np.isnan(w).any() or not np.array_equal(np.isnan(g), np.isnan(w)):
            return False, f"{name}: output {o.name}: NaN where kiln has none (or the reverse)"
        fin = np.isfinite(w)
        if not np.array_equal(g[~fin], w[~fin]):
            return False, f"{name}: output {o.name}: infinities differ"
        diff = np.abs(g[fin] - w[fin])
        worst = max(worst, float(diff.max()) if diff.size else 0.0)
        ok = ok and bool(np.all(diff <= atol + rtol * np.abs(w[fin])))
    status = "ok" if ok else "FAILED"
    return ok, (f"{name}: onnx.checker ok, onnxruntime {ort.__version__} against kiln: max |diff| {worst:.3g} "
                f"(rtol {rtol:g}, atol {atol:g}) {status}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()
    models = sorted(glob.glob(os.path.join(args.dir, "*.onnx")))
    if not models:
        raise SystemExit(f"no .onnx files in {args.dir} (run bench/onnx_export_samples.lua first)")
    good = True
    for m in models:
        ok, line = check(m, args.rtol, args.atol)
        print(line, flush=True)
        good = good and ok
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
