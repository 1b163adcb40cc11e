/* kn_backend: the registry of backends and their device objects. (The
 * options a backend runs an op with come with the op: kn_opcall.settings.)
 *
 * Backends register themselves (kernels/kn_kernels.c), so core names none.
 * A kind's devices are opened lazily, once per index: the CUDA backend
 * probes its driver only when a cuda device is first asked for.
 */
#include "kn_backend.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct device_slot {
    kn_device_ctx *ctx; /* published once opened; never freed (devices live for the process) */
    bool tried;         /* open was asked (successfully or not) */
} device_slot;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const kn_backend *kinds[KN_DEVICE_KINDS];
static kn_backend_open_fn openers[KN_DEVICE_KINDS];
static device_slot slots[KN_DEVICE_KINDS][KN_DEVICE_MAX_INDEX];

static bool in_range(kn_device dev)
{
    return dev >= 0 && (unsigned)kn_device_kind_of(dev) < KN_DEVICE_KINDS &&
           kn_device_index(dev) < KN_DEVICE_MAX_INDEX;
}

void kn_backend_register_kind(const kn_backend *be, kn_backend_open_fn open)
{
    if ((unsigned)be->kind >= KN_DEVICE_KINDS) return;
    pthread_mutex_lock(&registry_lock);
    kinds[be->kind] = be;
    openers[be->kind] = open;
    pthread_mutex_unlock(&registry_lock);
}

static kn_device_ctx *new_ctx(const kn_backend *be, int index)
{
    kn_device_ctx *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->be = be;
    d->index = index;
    d->device = kn_device_make(be->kind, index);
    return d;
}

kn_status kn_backend_add_device(const kn_backend *be, int index, void *state)
{
    if ((unsigned)be->kind >= KN_DEVICE_KINDS || index < 0 || index >= KN_DEVICE_MAX_INDEX)
        return kn_error(KN_ERR_ARG, "backend %s: no device index %d (kiln addresses 0 to %d)", be->name, index,
                        KN_DEVICE_MAX_INDEX - 1);
    pthread_mutex_lock(&registry_lock);
    device_slot *s = &slots[be->kind][index];
    kn_status st = KN_OK;
    if (s->ctx) {
        st = kn_error(KN_ERR_ARG, "device %s is already present", kn_device_name(s->ctx->device));
    } else {
        kn_device_ctx *d = new_ctx(be, index);
        if (!d) {
            st = kn_error(KN_ERR_OOM, "out of host memory for a device object");
        } else {
            d->state = state;
            s->tried = true;
            __atomic_store_n(&s->ctx, d, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return st;
}

static kn_device_ctx *open_locked(device_slot *s, kn_device dev)
{
    if (s->tried) return s->ctx;
    kn_device_kind kind = kn_device_kind_of(dev);
    if (!kinds[kind] || !openers[kind]) return NULL; /* not registered yet: ask again later */
    s->tried = true;
    kn_device_ctx *d = new_ctx(kinds[kind], kn_device_index(dev));
    if (!d) return NULL;
    kn_status st = openers[kind](d);
    if (st != KN_OK) { /* absent: callers say so with kn_backend_missing */
        free(d);
        return NULL;
    }
    __atomic_store_n(&s->ctx, d, __ATOMIC_RELEASE);
    return d;
}

kn_device_ctx *kn_backend_get(kn_device dev)
{
    if (!in_range(dev)) return NULL;
    device_slot *s = &slots[kn_device_kind_of(dev)][kn_device_index(dev)];
    kn_device_ctx *d = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
    if (d) return d;
    pthread_mutex_lock(&registry_lock);
    d = open_locked(s, dev);
    pthread_mutex_unlock(&registry_lock);
    return d;
}

kn_status kn_backend_missing(kn_device dev, const char *what)
{
    return kn_error(KN_ERR_DEVICE, "%s%sdevice %s is not available", what ? what : "", what ? ": " : "",
                    kn_device_name(dev));
}
