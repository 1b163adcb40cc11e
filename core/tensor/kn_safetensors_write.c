/* kn_safetensors_write: the safetensors writer (see kn_safetensors.h):
 * the arguments checked, the header built as the Python library builds it
 * (entries by dtype alignment then name, compact JSON, padded to 8 bytes),
 * and the file written through a temporary one, renamed at the end. */
#include "kn_safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_fs.h"
#include "kn_safetensors_internal.h"
#include "kn_strbuf.h"

/* ---------------------------------------------------------------- saving */

/* A JSON string, escaped as serde_json does (the reference writer): the two
 * mandatory escapes, short forms for \b \f \n \r \t, \u00XX for the other
 * control characters, everything else (UTF-8 included) as is. */
static void sb_json_str(kn_strbuf *b, const char *s)
{
    kn_strbuf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': kn_strbuf_put(b, "\\\"", 2); break;
        case '\\': kn_strbuf_put(b, "\\\\", 2); break;
        case '\b': kn_strbuf_put(b, "\\b", 2); break;
        case '\f': kn_strbuf_put(b, "\\f", 2); break;
        case '\n': kn_strbuf_put(b, "\\n", 2); break;
        case '\r': kn_strbuf_put(b, "\\r", 2); break;
        case '\t': kn_strbuf_put(b, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                kn_strbuf_puts(b, esc);
            } else {
                kn_strbuf_put(b, (const char *)p, 1);
            }
        }
    }
    kn_strbuf_put(b, "\"", 1);
}

typedef struct st_item {
    const char *name;
    int rank, idx;
} st_item;

static int cmp_item_name(const void *a, const void *b)
{
    return strcmp(((const st_item *)a)->name, ((const st_item *)b)->name);
}

/* The reference order: descending dtype alignment, then name. */
static int cmp_item_write(const void *a, const void *b)
{
    const st_item *x = a, *y = b;
    if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Sort items by name and reject duplicates. */
static kn_status sort_unique(st_item *it, int n, const char *path, const char *what)
{
    qsort(it, (size_t)n, sizeof *it, cmp_item_name);
    for (int i = 1; i < n; i++)
        if (strcmp(it[i - 1].name, it[i].name) == 0)
            return kn_error(KN_ERR_ARG, "%s: duplicate %s '%.80s'", path, what, it[i].name);
    return KN_OK;
}

/* Write t's elements in C order, gathering strided views through a buffer. */
static kn_status write_tensor(FILE *f, const kn_tensor *t, const char *tmp)
{
    size_t es = kn_dtype_size(t->dtype);
    int64_t numel = kn_tensor_numel(t);
    if (numel == 0) return KN_OK;
    const unsigned char *base = kn_tensor_data(t);
    if (kn_tensor_is_contiguous(t) && !ST_BIG_ENDIAN) {
        if (fwrite(base, es, (size_t)numel, f) != (size_t)numel)
            return kn_error(KN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        return KN_OK;
    }
    enum { CHUNK = 1 << 16 };
    unsigned char buf[CHUNK];
    size_t used = 0;
    int64_t idx[KN_MAX_DIMS] = {0};
    int nd = t->ndim;
    int64_t inner = nd ? t->shape[nd - 1] : 1, istride = nd ? t->strides[nd - 1] : 0;
    for (int64_t done = 0; done < numel; done += inner) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++) off += idx[d] * t->strides[d];
        for (int64_t k = 0; k < inner; k++) {
            if (used + es > CHUNK) {
                if (ST_BIG_ENDIAN) kn_st_swap_elems(buf, (int64_t)(used / es), es);
                if (fwrite(buf, 1, used, f) != used)
                    return kn_error(KN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
                used = 0;
            }
            memcpy(buf + used, base + (off + k * istride) * (int64_t)es, es);
            used += es;
        }
        for (int d = nd - 2; d >= 0; d--) { /* odometer over the outer dims */
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    if (ST_BIG_ENDIAN) kn_st_swap_elems(buf, (int64_t)(used / es), es);
    if (used && fwrite(buf, 1, used, f) != used)
        return kn_error(KN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    return KN_OK;
}

/* Check the arguments of a save and put the tensors in writing order. */
/* The header is JSON, which kiln's loader (and every other) reads as UTF-8:
 * a string that is not would be saved, then refused on load. */
static kn_status check_utf8(const char *path, const char *what, const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t k = kn_st_utf8_seq((const unsigned char *)s + i, len - i);
        if (!k)
            return kn_error(KN_ERR_ARG, "%s: %s '%.80s' is not valid UTF-8 (byte %zu is 0x%02x); safetensors "
                            "names and metadata are UTF-8 text", path, what, s, i + 1, (unsigned char)s[i]);
        i += k;
    }
    return KN_OK;
}

static kn_status save_prepare(const char *path, int n, const char *const *names,
                              kn_tensor *const *tensors, int n_meta, const char *const *mk,
                              const char *const *mv, st_item *items, st_item *meta)
{
    for (int i = 0; i < n; i++) {
        if (!names[i] || !tensors[i])
            return kn_error(KN_ERR_ARG, "%s: tensor %d has no name or no tensor", path, i + 1);
        KN_TRY(check_utf8(path, "tensor name", names[i]));
        if (strcmp(names[i], "__metadata__") == 0)
            return kn_error(KN_ERR_ARG, "%s: '__metadata__' is reserved and cannot name a tensor",
                            path);
        int rank = kn_st_dtype_rank(tensors[i]->dtype);
        if (rank < 0)
            return kn_error(KN_ERR_DTYPE, "%s: tensor '%.80s' has a dtype safetensors cannot hold",
                            path, names[i]);
        if (!tensors[i]->storage) /* a traced placeholder: shape and dtype, no bytes yet */
            return kn_error(KN_ERR_ARG, "%s: tensor '%.80s' has no value yet (a traced tensor "
                            "of a compiled function); save it after the call", path, names[i]);
        if (kn_device_kind_of(kn_tensor_device(tensors[i])) != KN_DEVICE_CPU)
            return kn_error(KN_ERR_DEVICE, "%s: tensor '%.80s' is on %s; copy it to the cpu "
                            "before saving", path, names[i],
                            kn_device_name(kn_tensor_device(tensors[i])));
        items[i] = (st_item){names[i], rank, i};
    }
    for (int i = 0; i < n_meta; i++) {
        if (!mk[i] || !mv[i])
            return kn_error(KN_ERR_ARG, "%s: metadata pair %d has no key or no value", path, i + 1);
        KN_TRY(check_utf8(path, "metadata key", mk[i]));
        KN_TRY(check_utf8(path, "metadata value", mv[i]));
        meta[i] = (st_item){mk[i], 0, i};
    }
    KN_TRY(sort_unique(items, n, path, "tensor name"));
    KN_TRY(sort_unique(meta, n_meta, path, "metadata key"));
    qsort(items, (size_t)n, sizeof *items, cmp_item_write);
    return KN_OK;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static kn_status build_header(kn_strbuf *b, int n, const st_item *items, kn_tensor *const *tensors,
                              int n_meta, const st_item *meta, const char *const *mv,
                              const char *path)
{
    kn_strbuf_put(b, "{", 1);
    if (n_meta > 0) {
        kn_strbuf_puts(b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) kn_strbuf_put(b, ",", 1);
            sb_json_str(b, meta[i].name);
            kn_strbuf_put(b, ":", 1);
            sb_json_str(b, mv[meta[i].idx]);
        }
        kn_strbuf_put(b, "}", 1);
        if (n > 0) kn_strbuf_put(b, ",", 1);
    }
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const kn_tensor *t = tensors[items[i].idx];
        char num[64];
        int64_t nbytes = kn_tensor_numel(t) * (int64_t)kn_dtype_size(t->dtype);
        if (i) kn_strbuf_put(b, ",", 1);
        sb_json_str(b, items[i].name);
        kn_strbuf_puts(b, ":{\"dtype\":\"");
        kn_strbuf_puts(b, kn_st_dtype_name(t->dtype));
        kn_strbuf_puts(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            kn_strbuf_puts(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)off,
                 (long long)(off + nbytes));
        kn_strbuf_puts(b, num);
        off += nbytes;
    }
    kn_strbuf_put(b, "}", 1);
    while (!b->oom && b->len % 8) kn_strbuf_put(b, " ", 1);
    if (b->oom) return kn_error(KN_ERR_OOM, "%s: out of memory building the header", path);
    if ((int64_t)b->len > KN_ST_MAX_HEADER)
        return kn_error(KN_ERR_ARG, "%s: the header would exceed %lld bytes", path,
                        (long long)KN_ST_MAX_HEADER);
    return KN_OK;
}

kn_status kn_safetensors_save(const char *path, int n, const char *const *names,
                              kn_tensor *const *tensors, int n_meta,
                              const char *const *meta_keys, const char *const *meta_values)
{
    if (!path || n < 0 || n_meta < 0 || (n > 0 && (!names || !tensors)) ||
        (n_meta > 0 && (!meta_keys || !meta_values)))
        return kn_error(KN_ERR_ARG, "safetensors save: bad arguments");
    st_item *items = malloc(((size_t)n + (size_t)n_meta + 1) * sizeof *items);
    if (!items) return kn_error(KN_ERR_OOM, "%s: out of memory", path);
    st_item *meta = items + n;
    kn_strbuf b = {0};
    kn_status st = save_prepare(path, n, names, tensors, n_meta, meta_keys, meta_values, items, meta);
    if (st == KN_OK) st = build_header(&b, n, items, tensors, n_meta, meta, meta_values, path);
    /* Saving over a symbolic link replaces the file it points to, not the
     * link, as writing through it would. */
    char *real = realpath(path, NULL);
    if (real) path = real;
    char *tmp = NULL;
    FILE *f = NULL;
    if (st == KN_OK) st = kn_fs_open_temp(path, &tmp, &f);
    if (st == KN_OK) {
        unsigned char lb[8];
        for (int i = 0; i < 8; i++) lb[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
        if (fwrite(lb, 1, 8, f) != 8 || fwrite(b.p, 1, b.len, f) != b.len)
            st = kn_error(KN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        for (int i = 0; i < n && st == KN_OK; i++) st = write_tensor(f, tensors[items[i].idx], tmp);
        st = kn_fs_commit_temp(f, tmp, path, st);
    }
    free(tmp);
    free(real);
    free(b.p);
    free(items);
    return st;
}
