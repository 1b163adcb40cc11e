/* kn_cuda_device: device discovery for :device and for choosing the default
 * device. Uses the CUDA runtime only; NVRTC and cuDNN come with the backend. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "kn_cuda.h"

kn_status kn_cuda_query_devices(kn_cuda_device_info *out, int max, int *count)
{
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    /* the runtime says "driver version is insufficient" also where there is
     * no driver at all (a machine without a GPU): tell the two apart */
    if (e == cudaErrorInsufficientDriver && driver == 0)
        return kn_error(KN_ERR_DEVICE, "no NVIDIA driver is installed (no GPU on this machine)");
    if (e == cudaErrorInsufficientDriver)
        return kn_error(KN_ERR_DEVICE, "the NVIDIA driver is too old: it supports CUDA %d.%d, kiln's CUDA runtime is %d.%d",
                        driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    if (e != cudaSuccess)
        return kn_error(KN_ERR_DEVICE, "no CUDA device: %s", cudaGetErrorString(e));
    *count = n;
    for (int i = 0; i < n && i < max; i++) {
        kn_cuda_device_info *d = &out[i];
        memset(d, 0, sizeof *d);
        struct cudaDeviceProp p;
        e = cudaGetDeviceProperties(&p, i);
        if (e != cudaSuccess)
            return kn_error(KN_ERR_DEVICE, "CUDA device %d: %s", i, cudaGetErrorString(e));
        snprintf(d->name, sizeof d->name, "%s", p.name);
        d->memory_bytes = (int64_t)p.totalGlobalMem;
        d->sm_count = p.multiProcessorCount;
        d->cc_major = p.major;
        d->cc_minor = p.minor;
        d->l2_bytes = p.l2CacheSize;
        d->driver_version = driver;
        d->runtime_version = runtime;
        size_t free_b = 0, total_b = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            d->free_bytes = (int64_t)free_b;
    }
    return KN_OK;
}
