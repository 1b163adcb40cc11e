/* kn_device: device names. */
#include "kn_device.h"

#include <string.h>

const char *kn_device_name(kn_device d)
{
    return d == KN_CUDA ? "cuda" : "cpu";
}

kn_status kn_device_parse(const char *name, kn_device *out)
{
    if (strcmp(name, "cpu") == 0) *out = KN_CPU;
    else if (strcmp(name, "cuda") == 0 || strncmp(name, "cuda:", 5) == 0) *out = KN_CUDA;
    else return kn_error(KN_ERR_ARG, "unknown device '%s' (expected cpu or cuda)", name);
    return KN_OK;
}
