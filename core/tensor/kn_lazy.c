/* kn_lazy: the lifetime of a placeholder's graph value. */
#include "kn_lazy.h"

#include <stdlib.h>

struct kn_tensor *kn_lazy_release(kn_lazy *lz)
{
    if (!lz || --lz->refcount > 0) return NULL;
    struct kn_tensor *value = lz->value;
    free(lz);
    return value;
}
