"""Joins the raw rows of bench/gpu_bench.sh into the benchmark's table.

  python3 bench/report.py RAW.jsonl [MORE.jsonl ...] > RESULT.md

Several files (runs split with MODELS=...) are merged; a later row replaces
an earlier one with the same side, model, mode, dtype and phase, unless the
later one was skipped. Needs only
the Python standard library.
"""
import json, sys

MODELS = ["simple_linear", "large_linear", "convnet", "transformer_block", "transformer_block_onnx", "gcn"]
WORKLOAD = {
    "simple_linear": "simple_linear: Linear 1024->1024, batch 32",
    "large_linear": "large_linear: 4 x (Linear 4096->4096 + ReLU), batch 64",
    "convnet": "convnet: 4 x (conv3x3 s2 + BN + ReLU), pool, fc; 32x3x224x224",
    "transformer_block": "transformer_block: pre-LN, 8 heads, d 512, ff 2048, causal; 16x256",
    "transformer_block_onnx": "transformer_block_onnx: the same block exported by torch.onnx.export "
                              "(bench/export_onnx.py), loaded with kiln.onnx.load",
    "gcn": "gcn: 2 GCN layers, 2708 nodes, 1433 features, 10556 edges",
}
# An ONNX row's PyTorch columns are those of the module it was exported from.
TORCH_OF = {"transformer_block_onnx": "transformer_block"}
TORCH_MODES = ["eager", "default", "reduce-overhead", "max-autotune"]
KILN_MODES = ["eager", "default", "reduce-overhead", "max-autotune"]
DTYPES = ["f32", "bf16"]
TARGET = 0.8
# A kiln row whose output is further than this from PyTorch eager's (max abs
# error over the largest |output|) does not count as kiln's best: a fast wrong
# answer is not a result. bf16 keeps 8 bits of mantissa, so a few ulps of the
# largest output is a few 1e-3; accumulation order changes more than that.
TOL = {"f32": 1e-3, "bf16": 5e-2}
# A call replaying a CUDA graph may cost the host at most this (us, timed on
# an idle device: host_us_per_call); a row over it misses its target.
HOST_US_MAX = 50


def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def load(paths):
    env, rows = {}, {}
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                side = r.get("side", "")
                if side.startswith("env"):
                    env.setdefault(side, {}).update(r)
                elif side in ("torch", "kiln"):
                    key = (side, r.get("model"), r.get("mode"), r.get("dtype"), r.get("phase", "cold"))
                    # a row a later run skipped (its budget spent) does not
                    # hide the result an earlier run measured
                    if r.get("skipped") and key in rows and not rows[key].get("skipped"):
                        continue
                    rows[key] = r
    return env, rows


def ms(v):
    if v is None:
        return "-"
    return f"{v:.3f}" if v >= 0.1 else f"{v:.4f}"


def sec(v):
    return "-" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def sci(v):
    if isinstance(v, str):
        return v
    return "-" if v is None else f"{v:.2g}"


def mib(v):
    return "-" if v is None else f"{v:.1f}"


def first_line(s, n=160):
    s = (s or "").strip()
    lines = [l for l in s.splitlines() if l.strip()]
    # a Lua traceback's message is its first line; a Python one's is its last
    line = (lines[-1] if s.startswith("Traceback") else lines[0]) if lines else ""
    return line if len(line) <= n else line[: n - 3] + "..."


class Cell:
    """One timing cell and whether it may be a best."""

    def __init__(self, text, ms=None, usable=False, note=None):
        self.text, self.ms, self.usable, self.note = text, ms, usable, note


def torch_cell(r):
    if r is None:
        return Cell("-")
    if r.get("skipped"):
        return Cell("skipped", note=r["skipped"])
    if r.get("error"):
        return Cell("error", note=r["error"])
    return Cell(ms(r["ms_per_call"]), r["ms_per_call"], True)


def kiln_cell(r, dtype):
    if r is None:
        return Cell("-")
    if r.get("skipped"):
        return Cell("skipped", note=r["skipped"])
    if r.get("unsupported"):
        return Cell("n/a", note=r.get("error"))
    if r.get("error"):
        return Cell("error", note=r["error"])
    v = r.get("ms_per_call")
    if r.get("mode", "").startswith("max-autotune") and not r.get("autotuned"):
        return Cell("n/a", note="kiln accepts max-autotune but ran no autotuning (cm:stats().autotune_s and "
                                "autotune_cache_hits are 0); its time, as default, is in the raw rows")
    rel = num(r.get("max_rel_err"))
    text, usable, note = ms(v), True, None
    if rel is None or not rel <= TOL[dtype]:  # NaN fails too
        text, usable = text + " ✗", False
        note = f"output differs from PyTorch eager: max rel err {sci(r.get('max_rel_err'))} > {TOL[dtype]:g}"
    if r.get("synced") is False and r.get("device") != "cpu":
        text += " ?"
        note = "this kiln has no kiln.synchronize: the time is launch time, not device time"
    if r.get("mode") == "reduce-overhead" and not r.get("cuda_graph_replays"):
        text += " †"
    return Cell(text, v, usable, note)


def best(cells):
    c = [(cell.ms, mode) for mode, cell in cells.items() if cell.usable and cell.ms is not None]
    return min(c) if c else (None, None)


def kiln_peak_mib(r):
    """Device memory of a kiln row: the allocator's peak where kiln exposes
    one, else weights + input + the compiled plan's peak of intermediates."""
    if r is None:
        return None, ""
    dm = r.get("device_memory") or {}
    for k in ("peak_bytes", "max_allocated_bytes", "peak_allocated_bytes", "allocated_bytes_peak"):
        if num(dm.get(k)) is not None:
            return dm[k] / 2**20, ""
    pb = num(r.get("peak_bytes"))
    if pb is None:
        return None, ""
    return (pb + (r.get("param_bytes") or 0) + (r.get("input_bytes") or 0)) / 2**20, "≈"


def header(env):
    host, tor, kil = env.get("env-host", {}), env.get("env-torch", {}), env.get("env-kiln", {})
    gpu = host.get("gpu") or tor.get("gpu") or kil.get("gpu_name") or "unknown GPU"
    out = [f"# kiln vs PyTorch on {gpu}, {host.get('date', '?')}", ""]
    out.append(f"- GPU: {gpu}; {kil.get('gpu_sm_count') or tor.get('sm_count') or '?'} SMs, "
               f"compute capability {kil.get('gpu_cc') or tor.get('cc') or '?'}, "
               f"{tor.get('gpu_memory_mib', '?')} MiB")
    out.append(f"- driver {host.get('driver') or kil.get('gpu_driver') or '?'} "
               f"(nvidia-smi CUDA version {host.get('smi_cuda', '?')}); "
               f"kiln sees driver CUDA {kil.get('gpu_driver', '?')}")
    out.append(f"- PyTorch {tor.get('torch', '?')}: CUDA runtime {tor.get('cuda_runtime', '?')}, "
               f"cuDNN {tor.get('cudnn', '?')} (PyTorch's own wheels)")
    kx = ", ".join(f"{k[5:]} {v}" for k, v in sorted(kil.items()) if k.startswith("cuda_") and k not in
                   ("cuda_built", "cuda_error")) or "runtime and cuDNN versions not reported by kiln"
    out.append(f"- kiln {kil.get('kiln', '?')}, commit {host.get('commit', '?')}, "
               f"CUDA backend built: {kil.get('cuda_built', '?')}; {kx}"
               + (f"; CUDA: {kil['cuda_error']}" if kil.get("cuda_error") else ""))
    out.append(f"- host: {kil.get('cpu', '?')}; Python {tor.get('python', '?')}")
    out.append(f"- method: per row its own process; a cold first call (compile included), "
               f"{host.get('warmup', '?')} warm-up calls, then {host.get('reps', '?')} repetitions of "
               f"{host.get('calls', '?')} back-to-back calls with a device sync after each; ms per call "
               f"is the median repetition; TF32 off on both sides; same weights, input and batch "
               f"(PyTorch's, exported and loaded into kiln)")
    if host.get("note"):
        out.append(f"- {host['note']}")
    ex = env.get("env-onnx-export")
    if ex:
        if ex.get("error"):
            out.append(f"- ONNX export ({ex.get('row', 'transformer_block_onnx')}): failed: {first_line(ex['error'], 300)}"
                       + (f" (dynamo exporter: {first_line(ex['dynamo_error'], 200)})" if ex.get("dynamo_error") else ""))
        else:
            ops = ", ".join(f"{k} {v}" for k, v in (ex.get("ops") or {}).items()) or ex.get("histogram_note", "?")
            ort = (f"onnxruntime vs PyTorch max rel err {sci(num(ex.get('ort_max_rel_err')))}"
                   if num(ex.get("ort_max_rel_err")) is not None else ex.get("ort_error") or ex.get("ort_note") or "")
            out.append(f"- ONNX export ({ex.get('row', 'transformer_block_onnx')}): {ex.get('exporter', '?')} exporter"
                       + (f" (dynamo failed: {first_line(ex['dynamo_error'], 200)})" if ex.get("dynamo_error") else "")
                       + f", PyTorch {ex.get('torch', '?')}, opset {ex.get('opset', '?')}, {ex.get('nodes', '?')} nodes: "
                       f"{ops}" + (f"; {ort}" if ort else "") + (f"; {ex['note']}" if ex.get("note") else ""))
    return out


PHASES = [("startup", "start-up"), ("capture", "capture"), ("passes", "passes"), ("source", "kernel source"),
          ("nvrtc", "kernel compile"), ("library_plans", "cuDNN/cuBLASLt plans"), ("autotune", "autotune"),
          ("run", "run")]


def real_tables(rows, models, dtypes):
    """The real-model suite's tables (bench/real_models.sh): the first call
    phase by phase, and device memory measured the same way on both sides.
    Empty for rows that carry neither."""
    first = ["## First call, phase by phase (kiln, cold cache)", "",
             "| workload | dtype | mode | first call s | " + " | ".join(p[1] for p in PHASES)
             + " | phases sum | accounted |", "|" + "---|" * (len(PHASES) + 6)]
    mem = ["## Device memory (MiB), measured the same way", "",
           "| workload | dtype | torch held (best mode) | kiln held (best mode) | torch allocator peak / reserved | "
           "kiln pool peak reserved |", "|---|---|---|---|---|---|"]
    for m in models:
        for d in dtypes:
            for md in KILN_MODES:
                r = rows.get(("kiln", m, md, d, "cold")) or {}
                fc = (r.get("stats_first") or {}).get("first_call")
                wall = num(r.get("first_call_s"))
                if not fc or wall is None:
                    continue
                total = sum(num(fc.get(k)) or 0 for k, _ in PHASES)
                first.append(f"| {m} | {d} | {md} | {sec(wall)} | "
                             + " | ".join(sec(num(fc.get(k))) for k, _ in PHASES)
                             + f" | {sec(total)} | {100 * total / wall:.0f}% |")
            tr = {md: rows.get(("torch", m, md, d, "cold")) for md in TORCH_MODES}
            kr = {md: rows.get(("kiln", m, md, d, "cold")) for md in KILN_MODES}
            _, tbm = best({md: torch_cell(r) for md, r in tr.items()})
            _, kbm = best({md: kiln_cell(r, d) for md, r in kr.items()})
            t, k = tr.get(tbm) or {}, kr.get(kbm) or {}
            if num(t.get("held_mib")) is None and num(k.get("held_mib")) is None:
                continue
            mem.append(f"| {m} | {d} | {mib(num(t.get('held_mib')))} ({tbm or '-'}) | {mib(num(k.get('held_mib')))} "
                       f"({kbm or '-'}) | {mib(num(t.get('peak_mib')))} / {mib(num(t.get('reserved_mib')))} | "
                       f"{mib(num(k.get('pool_peak_reserved_mib')))} |")
    out = []
    if len(first) > 4:
        out += first + ["", "Each phase is its own time (a phase inside another stops the outer one's clock: "
                        "kn_phase.h), from cm:stats().first_call; first call s is the bench's wall clock around "
                        "the call; accounted = phases sum / first call.", ""]
    if len(mem) > 4:
        out += mem + ["", "held: device memory the process holds after the timed calls over what it held before "
                      "loading the model (cudaMemGetInfo on both sides: allocator caches, CUDA-graph pools, "
                      "library workspaces and loaded kernels count). torch allocator: max_memory_allocated / "
                      "max_memory_reserved; kiln pool: kiln.memory_stats().peak_reserved_bytes.", ""]
    return out


def report(env, rows):
    models = [m for m in MODELS if any(k[1] == m for k in rows)]
    models += sorted({k[1] for k in rows if k[1] not in MODELS})
    dtypes = [d for d in DTYPES if any(k[3] == d for k in rows)]
    out = header(env) + [""]
    notes = {}  # message -> the rows it came from; one footnote per distinct message

    def footnote(message, where):
        notes.setdefault(message, []).append(where)
        return list(notes).index(message) + 1

    t1 = ["## Time per call (ms)", "",
          "| workload | dtype | torch eager | torch default | torch reduce-overhead | torch max-autotune | "
          "torch best (mode) | kiln eager | kiln default | kiln reduce-overhead | kiln max-autotune | "
          "kiln best (mode) | kiln best: host us a call (run, CUDA graph launch) | kiln best / torch best | target ≤ 0.8 met |",
          "|" + "---|" * 15]
    t2 = ["## Compile, memory, accuracy", "",
          "| workload | dtype | kiln first call s, cold (default) | compile_s capture / passes / codegen / backend "
          "| kiln first call s, warm cache | torch first call s (default) | peak MiB torch best | "
          "peak MiB kiln best | kiln best vs torch eager: max abs / rel err | worst kiln rel err (mode) | "
          "torch best vs eager rel err | f32 rel err vs float64: kiln best / torch best |",
          "|" + "---|" * 12]
    for m in models:
        for d in dtypes:
            tr = {md: rows.get(("torch", TORCH_OF.get(m, m), md, d, "cold")) for md in TORCH_MODES}
            kr = {md: rows.get(("kiln", m, md, d, "cold")) for md in KILN_MODES}
            if not any(tr.values()) and not any(kr.values()):
                continue
            tc = {md: torch_cell(r) for md, r in tr.items()}
            kc = {md: kiln_cell(r, d) for md, r in kr.items()}
            for cells, side in ((tc, "torch"), (kc, "kiln")):
                for md, c in cells.items():
                    if c.note:
                        c.text += f" [{footnote(first_line(c.note), f'{side} {m} {d} {md}')}]"
            tb, tbm = best(tc)
            kb, kbm = best(kc)
            ratio = kb / tb if kb is not None and tb else None
            met = "-" if ratio is None else ("yes" if ratio <= TARGET else "no")
            kbr = kr.get(kbm) if kbm else None
            host = num(kbr.get("host_us_per_call")) if kbr else None
            host_over = bool(kbr and kbr.get("cuda_graph_replays")) and host is not None and host > HOST_US_MAX
            host_text = "-" if host is None else f"{host:.0f}" + (" ✗" if host_over else "")
            run, launch = (num(kbr.get("host_run_us_per_call")), num(kbr.get("host_launch_us_per_call"))) \
                if kbr else (None, None)
            if host is not None and run is not None and kbr.get("cuda_graph_replays"):
                # the split: running the graph (of which the CUDA graph's launch), the rest the guards
                host_text += f" (run {run:.0f}, launch {launch or 0:.0f}"
                cin, cout = num(kbr.get("host_copy_in_us_per_call")), num(kbr.get("host_copy_out_us_per_call"))
                if cin is not None and cout is not None:  # rows from before the copies were timed have neither
                    host_text += f", copies in {cin:.0f}, out {cout:.0f}"
                guard = num(kbr.get("host_guard_us_per_call"))
                if guard is not None:  # rows from before the guards were timed have none
                    host_text += f"; guards {guard:.0f}"
                host_text += ")"

            if host_over and met == "yes":
                met = "no (host)"
            t1.append(f"| {m} | {d} | " + " | ".join(tc[md].text for md in TORCH_MODES)
                      + f" | {ms(tb)} ({tbm or '-'}) | " + " | ".join(kc[md].text for md in KILN_MODES)
                      + f" | {ms(kb)} ({kbm or '-'}) | {host_text} | {'-' if ratio is None else f'{ratio:.2f}'} | {met} |")

            kd = kr.get("default") or {}
            first = num(kd.get("first_call_s"))
            cs = (kd.get("stats_first") or {}).get("compile_s") or {}
            phases = " / ".join(sec(num(cs.get(p))) for p in ("capture", "passes", "codegen", "backend")) \
                if cs else "-"
            warm = rows.get(("kiln", m, "default", d, "warm")) or {}
            tdef = tr.get("default") or {}
            tbest = tr.get(tbm) or {}
            kbest = kr.get(kbm) if kbm else None
            kp, approx = kiln_peak_mib(kbest)
            worst = max(((num(r.get("max_rel_err")), md) for md, r in kr.items()
                         if r and num(r.get("max_rel_err")) is not None), default=(None, None))
            kerr = (f"{sci(kbest.get('max_abs_err'))} / {sci(kbest.get('max_rel_err'))}"
                    + ("" if kbest.get("ref") == "torch-eager" else f" (vs {kbest.get('ref')})")) if kbest else "-"
            # against PyTorch's float64 run of the same weights and input (f32 rows)
            f64 = (f"{sci(num((kbest or {}).get('f64_max_rel_err')))} / {sci(num(tbest.get('f64_max_rel_err')))}"
                   if d == "f32" else "-")
            t2.append(f"| {m} | {d} | {sec(first)} | {phases} | {sec(num(warm.get('first_call_s')))} | "
                      f"{sec(num(tdef.get('first_call_s')))} | {mib(num(tbest.get('peak_mib')))} | "
                      f"{approx}{mib(kp)} | {kerr} | "
                      f"{sci(worst[0])} ({worst[1] or '-'}) | {sci(tbest.get('max_rel_err')) if tbm != 'eager' else '0'} | "
                      f"{f64} |")
    # max-autotune: what the search bought and what it cost, against default and PyTorch
    t3 = ["## max-autotune", "",
          "| workload | dtype | kiln default ms | kiln max-autotune ms | MA / default | kiln search s "
          "(kernels, candidates) | kiln MA first call s, cold | kiln MA first call s, warm cache (choices reused) | "
          "CUDA graph | torch max-autotune ms | torch MA first call s | kiln MA / torch best |",
          "|" + "---|" * 12]
    for m in models:
        for d in dtypes:
            ma = rows.get(("kiln", m, "max-autotune", d, "cold"))
            if not ma:
                continue
            kd = rows.get(("kiln", m, "default", d, "cold")) or {}
            warm = rows.get(("kiln", m, "max-autotune", d, "warm")) or {}
            tma = rows.get(("torch", TORCH_OF.get(m, m), "max-autotune", d, "cold")) or {}
            tr = {md: rows.get(("torch", TORCH_OF.get(m, m), md, d, "cold")) for md in TORCH_MODES}
            tb, _ = best({md: torch_cell(r) for md, r in tr.items()})
            st = ma.get("stats_first") or {}
            wst = warm.get("stats_first") or {}
            dms, mms = num(kd.get("ms_per_call")), num(ma.get("ms_per_call"))
            graph = (ma.get("stats") or {}).get("cuda_graph") or "-"
            t3.append(f"| {m} | {d} | {ms(dms)} | {ms(mms)} | "
                      f"{'-' if not dms or mms is None else f'{mms / dms:.2f}'} | "
                      f"{sec(num(st.get('autotune_s')))} ({st.get('autotune_kernels', '-')}, "
                      f"{st.get('autotune_candidates', '-')}) | {sec(num(ma.get('first_call_s')))} | "
                      f"{sec(num(warm.get('first_call_s')))} ({wst.get('autotune_cache_hits', '-')} from the cache, "
                      f"{wst.get('autotune_kernels', '-')} measured) | {graph} | {ms(num(tma.get('ms_per_call')))} | "
                      f"{sec(num(tma.get('first_call_s')))} | "
                      f"{'-' if not tb or mms is None else f'{mms / tb:.2f}'} |")
    out += t1 + [""] + t2 + [""]
    if len(t3) > 4:
        out += t3 + ["", "MA = max-autotune. kiln search s: cm:stats().autotune_s of the cold first call (the "
                     "measured search, compiles of the candidates included). warm cache: a second process on the "
                     "cache dir the cold row filled; its choices come from autotune.tsv, nothing is measured. "
                     "CUDA graph: whether the tuned model replays one (max-autotune keeps it unless the plain run "
                     "measured faster by more than a call's host work outside the plan).", ""]
    out += real_tables(rows, models, dtypes)
    out += ["Legend: best = the fastest mode that ran without error (a kiln mode also needs its output within "
            f"{TOL['f32']:g} (f32) / {TOL['bf16']:g} (bf16) relative error of PyTorch eager's; ✗ marks one that is not); "
            "n/a = the mode is not implemented (max-autotune counts only when kiln reports autotuning: "
            "cm:stats().autotune_s or autotune_cache_hits > 0); † = reduce-overhead ran without CUDA graph replays "
            "(cm:stats().replays == 0); - = not run. kiln best: host us a call = the host's time for one call of "
            "kiln's best mode, each started on an idle device (the median of 20; a CUDA graph's launch included), "
            "and in brackets, as means over those calls, the part running the graph (its input and output copies "
            "and its launch) and the CUDA graph's launch alone (cm:stats().replay_run_s, replay_launch_s; the rest "
            "is the replay's guards and the Lua call), and, where reported, the copies in and out "
            "(replay_copy_in_s, replay_copy_out_s: queuing them, or pointing the recording's own copies at the "
            "call's tensors, and the results' allocation) and the direct replay's guards (replay_guard_s); "
            f"a row that replays a CUDA graph misses its target above {HOST_US_MAX} us (✗, \"no (host)\"). "
            "Relative error = max |kiln - torch| / max |torch|. "
            "f32 rel err vs float64: the same measure against PyTorch's float64 run of the same weights and input "
            "(exported with PyTorch eager's f32 row), for kiln's best mode and PyTorch's (the precision ledger's "
            "measure: docs/precision.md). "
            "Kiln peak MiB: the allocator's peak where kiln exposes one, else ≈ weights + input + "
            "cm:stats().peak_bytes (the compiled plan's intermediates); PyTorch: torch.cuda.max_memory_allocated() "
            "over one call after warm-up. kiln first call, warm cache: a second process on the persistent cache "
            "the cold row filled. gcn runs PyTorch's graph (its seeded src/dst/norm buffers, loaded into kiln's "
            "model with src and dst shifted to 1-based), not the graph samples/gcn.lua draws. "
            "transformer_block_onnx: kiln runs the ONNX file PyTorch exported (its weights, seeded by "
            "bench/export_onnx.py) and is checked against PyTorch eager's output on those weights; its torch columns "
            "are transformer_block's rows (the same module).", ""]
    if notes:
        out += ["Notes:", ""]
        for i, (message, where) in enumerate(notes.items(), 1):
            rows_text = ", ".join(where) if len(where) <= 4 else f"{len(where)} rows"
            out.append(f"{i}. {rows_text}: {message}")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    env, rows = load(sys.argv[1:])
    print(report(env, rows))
