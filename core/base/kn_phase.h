/* kn_phase: where a call's time goes, by named phase, so that a first call
 * of several seconds can be explained (kiln.explain, cm:stats().first_call).
 *
 * Phases nest: a phase begun inside another stops the outer one's clock
 * until it ends, so each phase's total is its own (exclusive) time and the
 * totals of the phases begun inside a span add up to that span. Each thread
 * keeps its own stack and totals (a compiled call runs in one thread); the
 * caller reads the totals before and after the span it explains.
 */
#ifndef KN_PHASE_H
#define KN_PHASE_H

typedef enum kn_phase {
    KN_PHASE_STARTUP,       /* CUDA context, cuDNN and cuBLASLt handles and libraries */
    KN_PHASE_CAPTURE,       /* tracing the function, guards, version lookup: host work of the call */
    KN_PHASE_PASSES,        /* graph passes */
    KN_PHASE_SOURCE,        /* fusion, kernel IR and the generated source */
    KN_PHASE_NVRTC,         /* kernel compiles: NVRTC and module loads (the C compiler on the CPU) */
    KN_PHASE_LIBRARY_PLANS, /* cuDNN graphs and engine choice, cuBLASLt descriptors and heuristics */
    KN_PHASE_AUTOTUNE,      /* max-autotune's measured search */
    KN_PHASE_RUN,           /* running the plans: launches, copies, CUDA graph recording, syncs */
    KN_PHASE_COUNT
} kn_phase;

/* Start phase p in this thread; the phase running until now pauses. */
void kn_phase_begin(kn_phase p);
/* End the innermost phase (p, which is checked); the one around it resumes. */
void kn_phase_end(kn_phase p);
/* This thread's totals so far, in seconds, of each phase (a phase still
 * running counts up to now). */
void kn_phase_totals(double out[KN_PHASE_COUNT]);
/* "startup", "capture", "passes", "kernel source", ... */
const char *kn_phase_name(kn_phase p);
/* "startup", "capture", "passes", "source", "nvrtc", "library_plans", ...:
 * the phase's key in cm:stats().first_call. */
const char *kn_phase_key(kn_phase p);

#endif
