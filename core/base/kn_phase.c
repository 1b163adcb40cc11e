/* kn_phase: per-thread nested phase clocks (see kn_phase.h). */
#include "kn_phase.h"

#include <assert.h>

#include "kn_clock.h"

enum { PHASE_DEPTH = 16 };

static _Thread_local struct {
    double total[KN_PHASE_COUNT];
    kn_phase stack[PHASE_DEPTH];
    int depth;    /* phases begun and not ended; beyond PHASE_DEPTH only counted */
    double since; /* when the innermost phase's clock last started */
} clocks;

static void charge_innermost(double now)
{
    int top = clocks.depth < PHASE_DEPTH ? clocks.depth : PHASE_DEPTH;
    if (top > 0) clocks.total[clocks.stack[top - 1]] += now - clocks.since;
    clocks.since = now;
}

void kn_phase_begin(kn_phase p)
{
    charge_innermost(kn_clock_s());
    if (clocks.depth < PHASE_DEPTH) clocks.stack[clocks.depth] = p;
    clocks.depth++;
}

void kn_phase_end(kn_phase p)
{
    (void)p;
    if (clocks.depth <= 0) return;
    assert(clocks.depth > PHASE_DEPTH || clocks.stack[clocks.depth - 1] == p);
    charge_innermost(kn_clock_s());
    clocks.depth--;
}

void kn_phase_totals(double out[KN_PHASE_COUNT])
{
    charge_innermost(kn_clock_s());
    for (int i = 0; i < KN_PHASE_COUNT; i++) out[i] = clocks.total[i];
}

static const char *const NAMES[KN_PHASE_COUNT][2] = {
    [KN_PHASE_STARTUP] = {"startup", "CUDA, cuDNN and cuBLASLt start-up"},
    [KN_PHASE_CAPTURE] = {"capture", "capture (tracing, guards, host work)"},
    [KN_PHASE_PASSES] = {"passes", "graph passes"},
    [KN_PHASE_SOURCE] = {"source", "fusion and kernel source"},
    [KN_PHASE_NVRTC] = {"nvrtc", "kernel compile (NVRTC, module load; the C compiler on the CPU)"},
    [KN_PHASE_LIBRARY_PLANS] = {"library_plans", "cuDNN and cuBLASLt plans"},
    [KN_PHASE_AUTOTUNE] = {"autotune", "autotune"},
    [KN_PHASE_RUN] = {"run", "the run (kernels, copies, CUDA graph recording)"},
};

const char *kn_phase_key(kn_phase p) { return p >= 0 && p < KN_PHASE_COUNT ? NAMES[p][0] : "?"; }
const char *kn_phase_name(kn_phase p) { return p >= 0 && p < KN_PHASE_COUNT ? NAMES[p][1] : "?"; }
