/* onnx_reader.c: the ONNX reader (onnx/reader/kn_onnx.c) on mutated copies of the
 * conformance models: every conformance model.onnx loads or fails with a
 * message naming it, and truncated copies and copies with random bytes
 * changed never crash (under the sanitizer build, never read out of bounds
 * or leak). KILN_FUZZ_SEED fixes the mutations (CI); KILN_ONNX_TESTDATA
 * overrides where the models are; KILN_ONNX_FUZZ_MODELS caps how many. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#ifndef KILN_HAVE_ONNX
int main(void)
{
    skip_all("kiln was built without ONNX import (protobuf-c missing)");
    return 0;
}
#else
#include "kn_fs.h"
#include "kn_onnx.h"

static uint64_t rng_state;
static uint64_t next_rand(void)
{
    /* splitmix64: the mutations depend only on the seed */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void)
{
    const char *root = getenv("KILN_ONNX_TESTDATA") ? getenv("KILN_ONNX_TESTDATA") : "/usr/share/libonnx-testdata/data";
    char node_dir[1024];
    snprintf(node_dir, sizeof node_dir, "%s/node", root);
    DIR *d = opendir(node_dir);
    if (!d) skip_all("no ONNX test data (Debian package libonnx-testdata)");
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            names = realloc(names, cap * sizeof *names);
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);

    const char *senv = getenv("KILN_FUZZ_SEED");
    uint64_t seed = senv ? strtoull(senv, NULL, 10) : (uint64_t)time(NULL) * 1000003u + (uint64_t)getpid();
    rng_state = seed;
    printf("# seed %llu\n", (unsigned long long)seed);
    size_t max_models = getenv("KILN_ONNX_FUZZ_MODELS") ? (size_t)atol(getenv("KILN_ONNX_FUZZ_MODELS")) : 150;

    int loaded = 0, refused_clean = 0, unnamed = 0, mutants = 0, mutant_errors_unnamed = 0;
    size_t step = n > max_models ? n / max_models : 1;
    for (size_t i = 0; i < n; i += step) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s/model.onnx", node_dir, names[i]);
        kn_onnx_model *m = NULL;
        if (kn_onnx_load(path, &m) == KN_OK) {
            loaded++;
            kn_onnx_free(m);
        } else if (strstr(kn_last_error(), path)) {
            refused_clean++;
        } else {
            unnamed++;
            printf("# %s: %s\n", path, kn_last_error());
        }
        long size = 0;
        char *bytes = kn_read_file(path, 64L << 20, &size);
        if (!bytes || size <= 0) {
            free(bytes);
            continue;
        }
        char *copy = malloc((size_t)size);
        for (int k = 0; k < 8; k++) {
            memcpy(copy, bytes, (size_t)size);
            size_t len = (size_t)size;
            if (k % 2 == 0) {
                len = (size_t)(next_rand() % (uint64_t)size); /* truncated */
            } else {
                int flips = 1 + (int)(next_rand() % 8); /* random bytes changed */
                for (int f = 0; f < flips; f++) copy[next_rand() % (uint64_t)size] = (char)next_rand();
            }
            m = NULL;
            mutants++;
            if (kn_onnx_load_bytes(copy, len, "mutant.onnx", NULL, &m) == KN_OK) kn_onnx_free(m);
            else if (!strstr(kn_last_error(), "mutant.onnx") && !strstr(kn_last_error(), "out of memory"))
                mutant_errors_unnamed++, printf("# mutant of %s: %s\n", names[i], kn_last_error());
        }
        free(copy);
        free(bytes);
    }
    printf("# %d models loaded, %d refused, %d mutants\n", loaded, refused_clean, mutants);
    ok(loaded > 50, "conformance models load (%d)", loaded);
    is_int(unnamed, 0, "every refused model's error names its file");
    ok(mutants > 100, "mutated copies were read (%d)", mutants);
    is_int(mutant_errors_unnamed, 0, "every refused mutant's error names it");
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return done_testing();
}
#endif
