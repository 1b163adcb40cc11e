/* kn_cuda_backend: placeholder until the CUDA backend lands (issue 5). */
#include "kn_cuda_internal.h"

bool kn_cuda_available(void)
{
    return false;
}

const char *kn_cuda_unavailable_reason(void)
{
    return "the CUDA backend is not built yet";
}

const kn_backend kn_cuda_backend = {.name = "cuda", .device = KN_CUDA};
