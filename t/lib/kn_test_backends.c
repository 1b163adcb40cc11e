/* Linked into every C test program (CMakeLists.txt): registers kiln's
 * backends before main, as luaopen_kiln does for the kiln program. An
 * object file given to the linker directly is always kept, so the
 * constructor runs (one inside the kiln_core archive would be dropped). */
#include "kn_kernels.h"

__attribute__((constructor)) static void kn_test_register_backends(void)
{
    kn_kernels_register();
}
