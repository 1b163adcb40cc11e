/* kn_backend: the registry of backends (one per device) and the options
 * backends read. Its own module so that kn_tensor can allocate and free
 * storage without depending on the op table or eager dispatch. */
#include "kn_backend.h"

#ifdef KILN_HAVE_CUDA
#include "cuda/kn_cuda.h"
#endif

const kn_backend *kn_backend_get(kn_device dev)
{
    if (dev == KN_CPU) return &kn_cpu_backend;
#ifdef KILN_HAVE_CUDA
    if (dev == KN_CUDA && kn_cuda_available()) return &kn_cuda_backend;
#endif
    return NULL;
}

static bool g_allow_tf32;

void kn_set_allow_tf32(bool allow)
{
    g_allow_tf32 = allow;
}

bool kn_allow_tf32(void)
{
    return g_allow_tf32;
}
