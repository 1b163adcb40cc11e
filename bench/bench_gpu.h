/* bench_gpu.h: what the C benchmarks of kiln's GPU kernels
 * (bench/split_gemm.c, bench/split_conv.c) share: a seeded random source
 * (the same inputs on every run), the NAME_ONLY=a,b filter, and timing a
 * call as the mean of back-to-back launches between two CUDA events on
 * kiln's stream. */
#ifndef BENCH_GPU_H
#define BENCH_GPU_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kn_cuda.h"
#include "cuda/kn_cuda_context.h"
#include "kn_kernels.h"
#include "kn_status.h"
#include "kn_tensor.h"
#include "kn_view.h"

static uint64_t bench_rng = 0x9e3779b97f4a7c15ull;

/* uniform in [0, 1), xorshift: the same sequence on every run */
static double bench_unit(void)
{
    bench_rng ^= bench_rng << 13, bench_rng ^= bench_rng >> 7, bench_rng ^= bench_rng << 17;
    return (double)(bench_rng >> 11) / 9007199254740992.0;
}

/* whether problem `name` is in the comma list of env var `only` (all when unset) */
static bool bench_wanted(const char *only_env, const char *name)
{
    const char *only = getenv(only_env);
    if (!only) return true;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

/* A benchmark's start: kiln's backends registered and the GPU started,
 * *reps from env var reps_env (default 20), two events to time with.
 * False (it says "NAME: no GPU") where there is none: the benchmark then
 * exits 0, as on CI. */
static bool bench_gpu_begin(const char *name, const char *reps_env, int *reps, cudaEvent_t *e0, cudaEvent_t *e1)
{
    kn_kernels_register();
    if (!kn_cuda_available() || kn_cuda_init() != KN_OK) {
        printf("%s: no GPU\n", name);
        return false;
    }
    *reps = getenv(reps_env) ? atoi(getenv(reps_env)) : 20;
    cudaEventCreate(e0);
    cudaEventCreate(e1);
    return true;
}

/* fn(ud)'s time in microseconds: 3 warm-up calls, then the mean of reps
 * back-to-back calls between two events; -1 (said) when a call fails */
static float bench_time_us(kn_status (*fn)(void *), void *ud, int reps, cudaEvent_t e0, cudaEvent_t e1)
{
    kn_status st = KN_OK;
    for (int i = 0; i < 3 && st == KN_OK; i++) st = fn(ud);
    cudaEventRecord(e0, kn_cuda_stream());
    for (int i = 0; i < reps && st == KN_OK; i++) st = fn(ud);
    cudaEventRecord(e1, kn_cuda_stream());
    float ms = 0;
    if (st != KN_OK || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
        printf("    failed: %s\n", kn_last_error());
        return -1;
    }
    return 1e3f * ms / (float)reps;
}

/* The signed part of got's error against ref (same shape, any device and
 * dtype), over the mean magnitude: *shrink = sum (got - ref) sign(ref) /
 * sum |ref| (below 0: results pulled toward zero), *down = sum (got - ref)
 * / sum |ref| (below 0: toward minus infinity). Rounding to nearest leaves
 * both near 0, random errors cancelling over many outputs; truncation
 * leaves a fraction of an ulp, the same sign in every output, and such a
 * bias adds up from layer to layer where random errors do not. NaN when
 * the values cannot be read. */
static void bench_bias(kn_tensor *got, kn_tensor *ref, double *shrink, double *down)
{
    *shrink = *down = NAN;
    kn_tensor *t[2] = {got, ref}, *f[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        kn_tensor *c = NULL;
        if (kn_tensor_to_device(t[i], KN_CPU, NULL, &c) == KN_OK) kn_tensor_cast(c, KN_F64, &f[i]);
        kn_tensor_release(c);
    }
    int64_t n = f[0] ? kn_tensor_numel(f[0]) : 0;
    double *g = malloc(sizeof(double) * (size_t)(n ? n : 1)), *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (f[0] && f[1] && kn_tensor_numel(f[1]) == n && g && r) {
        kn_tensor_gather_host(f[0], g);
        kn_tensor_gather_host(f[1], r);
        double sz = 0, sd = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            double e = g[i] - r[i];
            sz += r[i] < 0 ? -e : r[i] > 0 ? e : 0;
            sd += e;
            mag += fabs(r[i]);
        }
        if (mag > 0) *shrink = sz / mag, *down = sd / mag;
    }
    free(g), free(r);
    kn_tensor_release(f[0]);
    kn_tensor_release(f[1]);
}

#endif
