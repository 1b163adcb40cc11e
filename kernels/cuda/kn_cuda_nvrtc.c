/* kn_cuda_nvrtc: NVRTC compilation of generated kernels (see kn_cuda_nvrtc.h). */
#include "kn_cuda_nvrtc.h"
#include "kn_phase.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kn_nvrtc_version(void)
{
    static char v[32];
    int major = 0, minor = 0;
    if (!v[0] && nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
        snprintf(v, sizeof v, "%d.%d", major, minor);
    return v;
}

/* The program log as a new string ("" when empty; NULL on OOM). */
static char *program_log(nvrtcProgram prog)
{
    size_t n = 0;
    if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) n = 1;
    char *log = calloc(1, n + 1);
    if (log && n > 1 && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
    return log;
}

static kn_status nvrtc_compile(const char *src, const char *arch, char **image, size_t *size, char **log);

kn_status kn_nvrtc_compile(const char *src, const char *arch, char **image, size_t *size, char **log)
{
    kn_phase_begin(KN_PHASE_NVRTC);
    kn_status st = nvrtc_compile(src, arch, image, size, log);
    kn_phase_end(KN_PHASE_NVRTC);
    return st;
}

static kn_status nvrtc_compile(const char *src, const char *arch, char **image, size_t *size, char **log)
{
    *image = NULL;
    *size = 0;
    if (log) *log = NULL;
    bool cubin = strncmp(arch, "sm_", 3) == 0;
    if (!cubin && strncmp(arch, "compute_", 8) != 0)
        return kn_error(KN_ERR_ARG, "nvrtc: arch '%s' is neither sm_XX nor compute_XX", arch);
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[] = {archopt, "--fmad=false", "-default-device", "--std=c++17"};
    nvrtcProgram prog;
    nvrtcResult rc = nvrtcCreateProgram(&prog, src, "kiln_kernels.cu", 0, NULL, NULL);
    if (rc != NVRTC_SUCCESS)
        return kn_error(KN_ERR_DEVICE, "nvrtc: cannot create a program: %s", nvrtcGetErrorString(rc));
    rc = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    char *plog = program_log(prog);
    kn_status st = KN_OK;
    if (rc != NVRTC_SUCCESS) {
        st = kn_error(KN_ERR_UNSUPPORTED, "nvrtc (%s, %s) failed: %s\n%s", kn_nvrtc_version(), arch,
                      nvrtcGetErrorString(rc), plog ? plog : "");
    } else {
        size_t n = 0;
        rc = cubin ? nvrtcGetCUBINSize(prog, &n) : nvrtcGetPTXSize(prog, &n);
        char *img = rc == NVRTC_SUCCESS && n ? malloc(n) : NULL;
        if (img) rc = cubin ? nvrtcGetCUBIN(prog, img) : nvrtcGetPTX(prog, img);
        if (!img || rc != NVRTC_SUCCESS) {
            free(img);
            st = rc != NVRTC_SUCCESS
                     ? kn_error(KN_ERR_DEVICE, "nvrtc: cannot fetch the image: %s", nvrtcGetErrorString(rc))
                     : kn_error(KN_ERR_OOM, "nvrtc: out of memory for a %zu-byte image", n);
        } else {
            *image = img;
            *size = n;
        }
    }
    nvrtcDestroyProgram(&prog);
    if (log) *log = plog;
    else free(plog);
    return st;
}
