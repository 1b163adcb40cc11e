/* kn_kernels: registers every backend built into kiln. */
#include "kn_kernels.h"

#include <pthread.h>

#include "cpu/kn_cpu_backend.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/kn_cuda.h"
#endif

static pthread_once_t registered = PTHREAD_ONCE_INIT;

static void register_all(void)
{
    kn_cpu_register();
#ifdef KILN_HAVE_CUDA
    kn_cuda_register();
#endif
}

void kn_kernels_register(void)
{
    pthread_once(&registered, register_all);
}
