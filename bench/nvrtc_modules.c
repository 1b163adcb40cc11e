/* bench/nvrtc_modules.c: how long NVRTC takes to compile each module of
 * kiln's own CUDA kernels, the cost a model's first call pays for every
 * module it needs and finds in no cache (kernels/cuda/kn_cuda_module.c).
 * Needs NVRTC only, no GPU; each time is the least of --runs compiles
 * (default 3), in seconds of wall clock on one thread.
 *
 *   build/bench/nvrtc_modules [--runs N] [--arch sm_90] [--all] [NAME...]
 *   build/bench/nvrtc_modules --file SRC.cu   (any source, as NVRTC gets it)
 *   build/bench/nvrtc_modules --dump DIR [NAME...]  (writes each source, no timing)
 *
 * Modules: "ops <dtype>" (kn_cuda_ops_source: every kernel) and "ops <dtype>
 * <kernel>" (one kernel, as models compile them), "linalg <name>"
 * (kn_cuda_linalg_module_source) and, with --all, every attention module
 * ("attention tc bf16 d64", "attention simt f32 n1", ...). NAME arguments
 * keep the modules whose name starts with one of them ("linalg",
 * "ops bf16"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kn_cuda_attention.h"
#include "cuda/kn_cuda_linalg.h"
#include "cuda/kn_cuda_nvrtc.h"
#include "cuda/kn_cuda_tsrc.h"
#include "kn_clock.h"
#include "kn_fs.h"

typedef struct bench_opts {
    int runs;
    const char *arch, *dump; /* dump: a folder to write the sources to instead */
    int n_names;
    char **names;
} bench_opts;

static bool wanted(const bench_opts *o, const char *module)
{
    if (o->n_names == 0) return true;
    for (int i = 0; i < o->n_names; i++)
        if (strncmp(module, o->names[i], strlen(o->names[i])) == 0) return true;
    return false;
}

/* The least compile time of o->runs; prints the row. Takes src. */
static double time_module(const bench_opts *o, const char *name, char *src)
{
    if (o->dump) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.cu", o->dump, name);
        for (char *p = path + strlen(o->dump) + 1; *p; p++)
            if (*p == ' ') *p = '_';
        FILE *f = fopen(path, "w");
        if (!f || fputs(src, f) < 0) printf("%-36s cannot write %s\n", name, path);
        else printf("%-36s %s\n", name, path);
        if (f) fclose(f);
        free(src);
        return 0;
    }
    double best = -1;
    size_t image_len = 0;
    for (int r = 0; r < o->runs; r++) {
        char *image = NULL;
        double t0 = kn_clock_s();
        kn_status st = kn_nvrtc_compile(src, o->arch, &image, &image_len, NULL);
        double t = kn_clock_s() - t0;
        free(image);
        if (st != KN_OK) {
            printf("%-36s failed: %s\n", name, kn_last_error());
            free(src);
            return 0;
        }
        if (best < 0 || t < best) best = t;
    }
    printf("%-36s %8.3f s  %7zu-byte source  %8zu-byte cubin\n", name, best, strlen(src), image_len);
    fflush(stdout);
    free(src);
    return best;
}

/* "ops <dtype>": the module of every kernel, which the tests compile;
 * "ops <dtype> <kernel>": the one-kernel modules models compile. */
static double bench_ops(const bench_opts *o)
{
    double sum = 0;
    for (int dt = 0; dt < KN_DTYPE_COUNT; dt++)
        for (int k = -1; k < KN_TK_COUNT; k++) {
            char name[96], *src = NULL;
            snprintf(name, sizeof name, "ops %s%s%s", kn_dtype_name((kn_dtype)dt), k < 0 ? "" : " ",
                     k < 0 ? "" : kn_cuda_ops_kernel_name(k));
            if (!wanted(o, name)) continue;
            if (kn_cuda_ops_source((kn_dtype)dt, k, &src) != KN_OK) {
                printf("%-36s no source: %s\n", name, kn_last_error());
                continue;
            }
            double t = time_module(o, name, src);
            if (k >= 0) sum += t; /* the sum is what a model needing every kernel would pay */
        }
    return sum;
}

static double bench_linalg(const bench_opts *o)
{
    double sum = 0;
    for (int m = 0; m < kn_cuda_linalg_module_count(); m++) {
        char name[64], *src = NULL;
        snprintf(name, sizeof name, "linalg %s", kn_cuda_linalg_module_name(m));
        if (!wanted(o, name)) continue;
        if (kn_cuda_linalg_module_source(m, &src) != KN_OK) {
            printf("%-36s no source: %s\n", name, kn_last_error());
            continue;
        }
        sum += time_module(o, name, src);
    }
    return sum;
}

static double bench_attention(const bench_opts *o)
{
    double sum = 0;
    kn_att_module all[KN_ATTENTION_MAX_MODULES];
    int n_all = kn_cuda_attention_modules(all, KN_ATTENTION_MAX_MODULES);
    for (int mi = 0; mi < n_all; mi++) {
        const kn_att_module *m = &all[mi];
        char name[64], *src = NULL;
        snprintf(name, sizeof name, "attention %s %s %s%d", kn_cuda_attention_module_tag(m->kind),
                 kn_dtype_name(m->dt), m->kind == KN_ATT_MODULE_SIMT ? "n" : "d", m->size);
        if (!wanted(o, name)) continue;
        if (kn_cuda_attention_source(m->kind, m->dt, m->size, &src) != KN_OK) {
            printf("%-36s no source: %s\n", name, kn_last_error());
            continue;
        }
        sum += time_module(o, name, src);
    }
    return sum;
}

int main(int argc, char **argv)
{
    bench_opts o = {.runs = 3, .arch = "sm_90"};
    const char *file = NULL;
    bool all = false;
    char **names = calloc((size_t)argc, sizeof *names);
    if (!names) return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) o.runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) o.arch = argv[++i];
        else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc) file = argv[++i];
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) o.dump = argv[++i];
        else if (strcmp(argv[i], "--all") == 0) all = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--runs N] [--arch sm_XX] [--all] [--file SRC] [--dump DIR] [NAME...]\n", argv[0]);
            return 2;
        } else names[o.n_names++] = argv[i];
    }
    o.names = names;
    if (o.runs < 1) o.runs = 1;
    printf("# NVRTC %s, %s, least of %d compiles\n", kn_nvrtc_version(), o.arch, o.runs);
    if (file) {
        long size = 0;
        char *src = kn_read_file(file, 1L << 26, &size);
        if (!src) {
            fprintf(stderr, "cannot read %s\n", file);
            return 1;
        }
        time_module(&o, file, src);
        free(names);
        return 0;
    }
    double ops = bench_ops(&o), linalg = bench_linalg(&o), attention = all ? bench_attention(&o) : 0;
    printf("# sums: ops (one-kernel modules) %.3f s, linalg %.3f s%s", ops, linalg, all ? "" : "\n");
    if (all) printf(", attention %.3f s\n", attention);
    free(names);
    return 0;
}
