/* kn_device: device names. */
#include "kn_device.h"

#include <stdlib.h>
#include <string.h>

static const char *const kn_device_names[KN_DEVICE_KINDS][KN_DEVICE_MAX_INDEX] = {
    {"cpu", "cpu:1", "cpu:2", "cpu:3", "cpu:4", "cpu:5", "cpu:6", "cpu:7"},
    {"cuda", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7"},
};
_Static_assert(KN_DEVICE_MAX_INDEX == 8, "kn_device_names has a name per device index");

const char *kn_device_name(kn_device d)
{
    unsigned kind = (unsigned)kn_device_kind_of(d), index = (unsigned)kn_device_index(d);
    if (kind >= KN_DEVICE_KINDS || index >= KN_DEVICE_MAX_INDEX) return "?";
    return kn_device_names[kind][index];
}

kn_status kn_device_parse(const char *name, kn_device *out)
{
    static const char *const kinds[KN_DEVICE_KINDS] = {"cpu", "cuda"};
    for (int k = 0; k < KN_DEVICE_KINDS; k++) {
        size_t n = strlen(kinds[k]);
        if (strncmp(name, kinds[k], n) != 0 || (name[n] != 0 && name[n] != ':')) continue;
        long index = 0;
        if (name[n] == ':') {
            const char *digits = name + n + 1;
            char *end = NULL;
            index = *digits >= '0' && *digits <= '9' ? strtol(digits, &end, 10) : -1;
            if (index < 0 || *end != 0)
                return kn_error(KN_ERR_ARG, "unknown device '%s' (expected %s or %s:N with N a device number)",
                                name, kinds[k], kinds[k]);
            if (index >= KN_DEVICE_MAX_INDEX)
                return kn_error(KN_ERR_ARG, "device '%s': kiln addresses %s:0 to %s:%d", name, kinds[k],
                                kinds[k], KN_DEVICE_MAX_INDEX - 1);
        }
        *out = kn_device_make((kn_device_kind)k, (int)index);
        return KN_OK;
    }
    return kn_error(KN_ERR_ARG, "unknown device '%s' (expected cpu or cuda)", name);
}
