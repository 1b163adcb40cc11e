/* t/nvrtc.c: the CUDA rendering of t/kir.c's kernels compiles with NVRTC
 * for sm_90 (no GPU needed); where a GPU is present, each kernel also runs
 * there and is compared with the CPU reference like the C kernels. The test
 * bodies are t/kir.c's, built with KIR_CUDA. */
#ifndef KILN_HAVE_CUDA
#include "tap.h"

int main(void)
{
    skip_all("no NVRTC");
}
#else
#define KIR_CUDA 1
#include "kir.c"
#endif
