/* kn_cuda_module: NVRTC programs, compiled once per process and once per
 * cache directory.
 *
 * A module's key hashes everything that changes the CUBIN: the source, the
 * arch, NVRTC's version, kiln's version and the compile options. Lookups go
 * to an in-memory table first (modules stay loaded for the process, so a
 * kernel pointer handed out stays valid), then to
 * <cache_dir>/cuda-<key>.cubin, then to NVRTC. A disk entry is a header
 * (magic, key, arch, lengths, checksums), the source it was built from and
 * the CUBIN; everything is checked before the bytes reach the driver, and
 * an entry that fails a check is reported and rebuilt. Entries are written
 * to a temporary file and renamed into place, so another process sees a
 * whole entry or none.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kn_cuda_module.h"

#include "kn_clock.h"
#include "kn_cuda_context.h"
#include "kn_cuda_nvrtc.h"
#include "kn_fs.h"
#include "kn_hash.h"
#include "kn_phase.h"
#include "kn_settings.h"

#ifndef KILN_VERSION
#define KILN_VERSION "dev"
#endif

/* kn_nvrtc_compile's options: part of the key, so changing them there
 * must change this string too (old entries then stop matching). */
#define NVRTC_OPTIONS "--fmad=false -default-device --std=c++17"
#define MAX_ENTRY_BYTES ((long)1 << 28)
#define N_BUCKETS 4096

struct kn_cuda_module {
    uint64_t key;
    char *src;
    cudaLibrary_t lib;
    struct kn_cuda_module *next;
};

typedef struct cubin_header {
    char magic[8];
    uint64_t key;
    char arch[16];
    uint64_t src_len, image_len;
    uint64_t image_sum;  /* FNV-1a of the CUBIN */
    uint64_t header_sum; /* FNV-1a of the fields above and the source */
} cubin_header;

static const char entry_magic[8] = {'K', 'N', 'C', 'U', 'B', 'I', 'N', 1};

/* Process-wide, for every GPU: a module is keyed by its source and the
 * GPU's architecture, and loaded context-independently (cudaLibrary), so
 * one entry serves all GPUs of that architecture. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static kn_cuda_module *buckets[N_BUCKETS];
static kn_cuda_module_stats stats;
static bool warned_write;

/* ---- the cache directory ---- */

/* The call's (kn_settings.cache_dir: one byte more than a dir may have,
 * so that a longer one reaches kn_cache_dir_check and is refused). */
const char *kn_cuda_cache_dir(void)
{
    const char *dir = kn_cuda_call_settings()->cache_dir;
    return dir[0] ? dir : NULL;
}

void kn_cuda_module_stats_get(kn_cuda_module_stats *s)
{
    pthread_mutex_lock(&lock);
    *s = stats;
    pthread_mutex_unlock(&lock);
}

/* ---- files ---- */



static bool write_all(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n;
}

static uint64_t header_sum(const cubin_header *h, const char *src)
{
    uint64_t s = kn_hash_bytes(KN_HASH_SEED, h, offsetof(cubin_header, header_sum));
    return kn_hash_bytes(s, src, (size_t)h->src_len);
}

/* NULL when buf is a valid entry for (key, arch, src), with *image in
 * buf; else why not. */
static const char *entry_verify(const char *buf, long size, uint64_t key, const char *arch, const char *src,
                                const char **image, size_t *image_len)
{
    cubin_header h;
    if ((size_t)size < sizeof h) return "truncated header";
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, entry_magic, sizeof h.magic) != 0) return "bad magic: not a kiln CUDA entry";
    uint64_t body = (uint64_t)size - sizeof h;
    if (h.src_len > body || h.image_len > body || h.src_len + h.image_len != body)
        return "length mismatch: truncated or extended";
    const char *esrc = buf + sizeof h;
    if (header_sum(&h, esrc) != h.header_sum) return "header checksum mismatch";
    if (h.key != key) return "key mismatch: a foreign entry";
    if (strncmp(h.arch, arch, sizeof h.arch) != 0) return "built for another GPU architecture";
    if (h.src_len != strlen(src) || memcmp(esrc, src, (size_t)h.src_len) != 0) return "built from another source";
    *image = esrc + h.src_len;
    *image_len = (size_t)h.image_len;
    if (h.image_len == 0) return "empty CUBIN";
    if (kn_hash_bytes(KN_HASH_SEED, *image, *image_len) != h.image_sum) return "checksum mismatch";
    return NULL;
}

/* Write an entry atomically: a temporary file in dir, then rename. errno
 * tells why on failure. */
static bool entry_write(const char *dir, const char *path, uint64_t key, const char *arch, const char *src,
                        const char *image, size_t image_len)
{
    char tmp[KN_CACHE_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp-cuda-%016llx-XXXXXX", dir, (unsigned long long)key); /* dir was checked */
    int fd = mkstemp(tmp);
    if (fd < 0) return false;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int err = errno;
        close(fd);
        unlink(tmp);
        errno = err;
        return false;
    }
    cubin_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, entry_magic, sizeof h.magic);
    h.key = key;
    snprintf(h.arch, sizeof h.arch, "%s", arch);
    h.src_len = strlen(src);
    h.image_len = image_len;
    h.image_sum = kn_hash_bytes(KN_HASH_SEED, image, image_len);
    h.header_sum = header_sum(&h, src);
    bool ok = write_all(f, &h, sizeof h) && write_all(f, src, (size_t)h.src_len) && write_all(f, image, image_len);
    int err = errno;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        if (!err) err = errno;
        unlink(tmp);
        errno = err ? err : EIO;
    }
    return ok;
}

/* ---- modules ---- */

static cudaError_t load_image(const char *image, cudaLibrary_t *lib)
{
    kn_phase_begin(KN_PHASE_NVRTC);
    cudaError_t e = cudaLibraryLoadData(lib, image, NULL, NULL, 0, NULL, NULL, 0);
    kn_phase_end(KN_PHASE_NVRTC);
    if (e != cudaSuccess) (void)cudaGetLastError(); /* a bad image is not sticky */
    return e;
}

static uint64_t module_key(const char *src, const char *arch)
{
    uint64_t h = kn_hash_str(KN_HASH_SEED, "kiln-cuda-module-1");
    h = kn_hash_str(h, arch);
    h = kn_hash_str(h, kn_nvrtc_version());
    h = kn_hash_str(h, KILN_VERSION);
    h = kn_hash_str(h, NVRTC_OPTIONS);
    return kn_hash_str(h, src);
}

/* A valid disk entry, loaded; false on a miss (a bad entry is reported). */
static bool disk_load(const char *path, uint64_t key, const char *arch, const char *src, cudaLibrary_t *lib)
{
    long size = 0;
    char *buf = kn_read_file(path, MAX_ENTRY_BYTES, &size);
    if (!buf) return false;
    const char *image = NULL;
    size_t image_len = 0;
    const char *why = entry_verify(buf, size, key, arch, src, &image, &image_len);
    char reason[160];
    if (!why) {
        /* the CUBIN goes to the driver from an aligned copy of its own */
        char *copy = malloc(image_len);
        cudaError_t e = cudaErrorMemoryAllocation;
        if (copy) {
            memcpy(copy, image, image_len);
            e = load_image(copy, lib);
            free(copy);
        }
        if (e == cudaSuccess) {
            free(buf);
            return true;
        }
        snprintf(reason, sizeof reason, "the driver refused it: %s", cudaGetErrorString(e));
        why = reason;
    }
    fprintf(stderr, "kiln: ignoring corrupt CUDA cache entry %s (%s); rebuilding\n", path, why);
    free(buf);
    return false;
}

/* A module's name for KILN_LOGS=nvrtc: the kernel a one-kernel module
 * selects (KN_KSEL_<name>, KN_LA_KERNEL), else its first kernel. */
static void module_label(const char *src, char *out, size_t cap)
{
    static const char *const marks[] = {"#define KN_KSEL_", "#define KN_LA_KERNEL ", "__global__ void "};
    for (int i = 0; i < 3; i++) {
        const char *p = strstr(src, marks[i]);
        if (!p) continue;
        p += strlen(marks[i]);
        if (strncmp(p, "__launch_bounds__(", 18) == 0 && (p = strchr(p, ')'))) p += 2;
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
        return;
    }
    snprintf(out, cap, "a module");
}

/* KILN_LOGS=nvrtc: every NVRTC compile, as it ends (a cold first call's
 * time is mostly these). Read from the process's KILN_LOGS: compiles run
 * on helper threads, which have no call settings. */
static void log_compile(const char *src, const char *arch, double s, bool ok)
{
    if (!(kn_settings_or_defaults(NULL)->logs & KN_SETTINGS_LOG_NVRTC)) return;
    char label[96];
    module_label(src, label, sizeof label);
    fprintf(stderr, "[nvrtc] %s %s for %s in %.3f s (%zu-byte source)\n", ok ? "compiled" : "failed to compile", label,
            arch, s, strlen(src));
}

bool kn_cuda_module_arch(const char *src, int arch, char *buf, size_t size)
{
    bool specific = strstr(src, KN_CUDA_ARCH_SPECIFIC_LINE) != NULL;
    snprintf(buf, size, "sm_%d%s", arch, specific ? "a" : "");
    return !specific || arch == 90;
}

kn_status kn_cuda_module_get(const char *src, const char *cache_dir, kn_cuda_module **m)
{
    return kn_cuda_module_get_ex(src, cache_dir, m, NULL);
}

kn_status kn_cuda_module_get_ex(const char *src, const char *cache_dir, kn_cuda_module **m, bool *cached)
{
    *m = NULL;
    if (cached) *cached = false;
    KN_TRY(kn_cuda_init());
    /* the memory cache's key: the GPU's architecture and the source (an
     * architecture-specific source differs from all others by its marker
     * line, so its sm_XXa is worked out only when it is not in memory) */
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", kn_cuda_arch());
    uint64_t key = module_key(src, arch);
    size_t bucket = (size_t)(key % N_BUCKETS);
    pthread_mutex_lock(&lock);
    for (kn_cuda_module *c = buckets[bucket]; c; c = c->next)
        if (c->key == key && strcmp(c->src, src) == 0) {
            stats.memory_hits++;
            pthread_mutex_unlock(&lock);
            if (cached) *cached = true;
            *m = c;
            return KN_OK;
        }
    pthread_mutex_unlock(&lock);

    if (!kn_cuda_module_arch(src, kn_cuda_arch(), arch, sizeof arch))
        return kn_error(KN_ERR_UNSUPPORTED, "cuda: a module for Hopper (sm_90a) only, on a GPU of compute capability %d.%d",
                        kn_cuda_arch() / 10, kn_cuda_arch() % 10);
    kn_cuda_module *mod = calloc(1, sizeof *mod);
    char *copy = strdup(src);
    if (!mod || !copy) {
        free(mod);
        free(copy);
        return kn_error(KN_ERR_OOM, "out of host memory for a CUDA module");
    }
    mod->key = key;
    mod->src = copy;
    char path[KN_CACHE_PATH_MAX] = "";
    bool use_disk = cache_dir && *cache_dir;
    if (use_disk) {
        char name[64];
        snprintf(name, sizeof name, "cuda-%016llx.cubin", (unsigned long long)key);
        kn_status st = kn_cache_dir_check(cache_dir);
        if (st == KN_OK) st = kn_cache_file_path(path, sizeof path, cache_dir, name);
        if (st != KN_OK) {
            free(copy);
            free(mod);
            return st;
        }
    }
    bool from_disk = use_disk && disk_load(path, key, arch, src, &mod->lib);
    if (!from_disk) {
        char *image = NULL;
        size_t image_len = 0;
        double t0 = kn_clock_s();
        kn_status st = kn_nvrtc_compile(src, arch, &image, &image_len, NULL);
        double took = kn_clock_s() - t0;
        pthread_mutex_lock(&lock);
        stats.compiles++;
        stats.compile_s += took;
        pthread_mutex_unlock(&lock);
        log_compile(src, arch, took, st == KN_OK);
        if (st == KN_OK && image_len == 0) st = kn_error(KN_ERR_DEVICE, "nvrtc gave an empty CUBIN for %s", arch);
        cudaError_t e = st == KN_OK ? load_image(image, &mod->lib) : cudaSuccess;
        if (st == KN_OK && e != cudaSuccess) st = kn_cuda_fail(e, "loading a CUDA module compiled by NVRTC");
        if (st != KN_OK) {
            free(image);
            free(copy);
            free(mod);
            return st;
        }
        if (use_disk && !(kn_make_dirs(cache_dir) && entry_write(cache_dir, path, key, arch, src, image, image_len))) {
            pthread_mutex_lock(&lock);
            bool warn = !warned_write;
            warned_write = true;
            pthread_mutex_unlock(&lock);
            if (warn)
                fprintf(stderr, "kiln: cannot write CUDA cache entry %s (%s); kernels will be compiled again "
                                "next run\n", path, strerror(errno));
        }
        free(image);
    }
    pthread_mutex_lock(&lock);
    if (from_disk) stats.disk_hits++;
    if (cached) *cached = from_disk;
    /* another thread may have loaded the same source meanwhile: keep both
     * (modules are never unloaded), the table serves the first */
    mod->next = buckets[bucket];
    buckets[bucket] = mod;
    pthread_mutex_unlock(&lock);
    *m = mod;
    return KN_OK;
}

/* One source of kn_cuda_modules_get, for a thread. */
typedef struct module_job {
    const char *src, *cache_dir;
    kn_cuda_dev *gpu;
    kn_cuda_module *m;
    bool cached;
    kn_status st;
    char why[1024]; /* the error's message: kiln's message buffer is per thread */
} module_job;

static void *module_job_run(void *arg)
{
    module_job *j = arg;
    j->st = kn_cuda_enter_gpu(j->gpu);
    if (j->st == KN_OK) j->st = kn_cuda_module_get_ex(j->src, j->cache_dir, &j->m, &j->cached);
    if (j->st != KN_OK) snprintf(j->why, sizeof j->why, "%s", kn_last_error());
    return NULL;
}

kn_status kn_cuda_modules_get(const char *const *srcs, int n, const char *cache_dir, kn_cuda_module **out,
                              bool *all_cached)
{
    module_job *jobs = calloc((size_t)(n > 0 ? n : 1), sizeof *jobs);
    pthread_t *threads = calloc((size_t)(n > 0 ? n : 1), sizeof *threads);
    bool *started = calloc((size_t)(n > 0 ? n : 1), sizeof *started);
    if (!jobs || !threads || !started) {
        free(jobs);
        free(threads);
        free(started);
        return kn_error(KN_ERR_OOM, "out of host memory compiling CUDA modules");
    }
    for (int i = 0; i < n; i++) jobs[i] = (module_job){.src = srcs[i], .cache_dir = cache_dir, .gpu = kn_cuda_current()};
    /* a thread that cannot start leaves its job to this one */
    for (int i = 1; i < n; i++) started[i] = pthread_create(&threads[i], NULL, module_job_run, &jobs[i]) == 0;
    if (n > 0) module_job_run(&jobs[0]);
    /* waiting for the others is compiling too (their clocks are their threads') */
    kn_phase_begin(KN_PHASE_NVRTC);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else module_job_run(&jobs[i]);
    }
    kn_phase_end(KN_PHASE_NVRTC);
    kn_status st = KN_OK;
    if (all_cached) *all_cached = true;
    for (int i = 0; i < n; i++) {
        out[i] = jobs[i].m;
        if (all_cached) *all_cached = *all_cached && jobs[i].cached;
        if (st == KN_OK && jobs[i].st != KN_OK) st = kn_error(jobs[i].st, "%s", jobs[i].why);
    }
    free(jobs);
    free(threads);
    free(started);
    return st;
}

kn_status kn_cuda_module_kernel(kn_cuda_module *m, const char *name, const void **fn)
{
    *fn = NULL;
    if (!m) return kn_error(KN_ERR_ARG, "cuda: no module to look up kernel '%s' in", name);
    cudaKernel_t k = NULL;
    cudaError_t e = cudaLibraryGetKernel(&k, m->lib, name);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kn_error(KN_ERR_UNSUPPORTED, "CUDA module has no kernel '%s' (%s)", name, cudaGetErrorString(e));
    }
    *fn = (const void *)k; /* the runtime takes a cudaKernel_t where it takes a kernel pointer */
    return KN_OK;
}

kn_status kn_cuda_launch(const void *fn, int64_t grid, int block, void *args_struct, size_t shmem)
{
    if (grid <= 0) return KN_OK; /* nothing to do: an empty tensor */
    if (grid > INT_MAX) return kn_error(KN_ERR_ARG, "cuda: bad launch configuration (grid %lld)", (long long)grid);
    return kn_cuda_launch_dims(fn, (unsigned)grid, 1, (unsigned)block, 1, args_struct, shmem);
}

kn_status kn_cuda_launch_dims(const void *fn, unsigned grid_x, unsigned grid_y, unsigned block_x, unsigned block_y,
                              void *args_struct, size_t shmem)
{
    return kn_cuda_launch_grid3(fn, grid_x, grid_y, 1, block_x, block_y, args_struct, shmem);
}

kn_status kn_cuda_launch_grid3(const void *fn, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                               unsigned block_y, void *args_struct, size_t shmem)
{
    if (grid_x == 0 || grid_y == 0 || grid_z == 0) return KN_OK; /* nothing to do: an empty tensor */
    if (!fn) return kn_error(KN_ERR_ARG, "cuda: launch of a NULL kernel");
    if (block_x == 0 || block_y == 0 || block_x * block_y > 1024 || grid_y > 65535 || grid_z > 65535)
        return kn_error(KN_ERR_ARG, "cuda: bad launch configuration (grid %u x %u x %u, block %u x %u)", grid_x,
                        grid_y, grid_z, block_x, block_y);
    dim3 g = {grid_x, grid_y, grid_z}, b = {block_x, block_y, 1};
    void *args[1] = {args_struct};
    cudaError_t e = cudaLaunchKernel(fn, g, b, args, shmem, kn_cuda_stream());
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return kn_cuda_fail(e, "launching a CUDA kernel");
    return KN_OK;
}
