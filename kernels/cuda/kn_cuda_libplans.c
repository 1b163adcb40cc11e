/* kn_cuda_libplans: open addressing over (hash, key copy, plan); the table
 * doubles at half full, and entries never move between lookups that the
 * caller could hold a plan across. */
#include "kn_cuda_libplans.h"

#include <stdlib.h>
#include <string.h>

typedef struct libplan_slot {
    uint64_t hash;
    void *key; /* a copy, key_size bytes; NULL: the slot is empty */
    void *plan;
} libplan_slot;

struct kn_cuda_libplans {
    size_t key_size;
    void (*destroy)(void *plan);
    libplan_slot *slots;
    size_t cap, count;
};

kn_cuda_libplans *kn_cuda_libplans_new(size_t key_size, void (*destroy)(void *plan))
{
    kn_cuda_libplans *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->key_size = key_size;
    c->destroy = destroy;
    return c;
}

void kn_cuda_libplans_free(kn_cuda_libplans *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->slots[i].key) continue;
        if (c->destroy) c->destroy(c->slots[i].plan);
        free(c->slots[i].key);
    }
    free(c->slots);
    free(c);
}

void *kn_cuda_libplans_find(const kn_cuda_libplans *c, const void *key, uint64_t hash)
{
    if (!c->cap) return NULL;
    for (size_t i = hash & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        const libplan_slot *s = &c->slots[i];
        if (!s->key) return NULL;
        if (s->hash == hash && memcmp(s->key, key, c->key_size) == 0) return s->plan;
    }
}

static void place(libplan_slot *slots, size_t cap, libplan_slot s)
{
    size_t j = s.hash & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = s;
}

kn_status kn_cuda_libplans_insert(kn_cuda_libplans *c, const void *key, uint64_t hash, void *plan)
{
    if ((c->count + 1) * 2 > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        libplan_slot *slots = calloc(cap, sizeof *slots);
        if (!slots) return kn_error(KN_ERR_OOM, "out of host memory for a library plan cache");
        for (size_t i = 0; i < c->cap; i++)
            if (c->slots[i].key) place(slots, cap, c->slots[i]);
        free(c->slots);
        c->slots = slots;
        c->cap = cap;
    }
    void *copy = malloc(c->key_size);
    if (!copy) return kn_error(KN_ERR_OOM, "out of host memory for a library plan cache");
    memcpy(copy, key, c->key_size);
    place(c->slots, c->cap, (libplan_slot){hash, copy, plan});
    c->count++;
    return KN_OK;
}
