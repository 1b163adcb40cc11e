/* kn_kconfig: the layouts a generated kernel can be rendered in (kn_kconfig
 * in kn_kir.h): their text form ("block=128 ept=4", what the autotune cache
 * file and kiln.autotune.pin use) and the candidates the autotuner measures
 * per kernel (the target's own, kn_render_target.candidates). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_kir.h"

static const struct {
    const char *name;
    size_t off;
} cfg_fields[] = {{"block", offsetof(kn_kconfig, block)},   {"ept", offsetof(kn_kconfig, ept)},
                  {"rows", offsetof(kn_kconfig, rows)},     {"unroll", offsetof(kn_kconfig, unroll)},
                  {"tile", offsetof(kn_kconfig, tile)},     {"vec", offsetof(kn_kconfig, vec)},
                  {"lanes", offsetof(kn_kconfig, lanes)}};
#define N_CFG_FIELDS (sizeof cfg_fields / sizeof cfg_fields[0])
static const char *const rows_names[] = {"auto", "block", "warp", "regs", "bregs"};
#define N_ROWS_NAMES (int)(sizeof rows_names / sizeof rows_names[0])

void kn_kconfig_text(const kn_kconfig *c, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t f = 0; f < N_CFG_FIELDS && n < size; f++) {
        int v = *(const int *)((const char *)c + cfg_fields[f].off);
        if (!v) continue;
        if (cfg_fields[f].off == offsetof(kn_kconfig, rows) && v > 0 && v < N_ROWS_NAMES)
            n += (size_t)snprintf(buf + n, size - n, "%srows=%s", n ? " " : "", rows_names[v]);
        else
            n += (size_t)snprintf(buf + n, size - n, "%s%s=%d", n ? " " : "", cfg_fields[f].name, v);
    }
    if (!buf[0]) snprintf(buf, size, "default");
}

kn_status kn_kconfig_parse(const char *text, kn_kconfig *c)
{
    memset(c, 0, sizeof *c);
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        size_t len = strcspn(p, " ,");
        char word[64];
        snprintf(word, sizeof word, "%.*s", (int)(len < 63 ? len : 63), p);
        p += len;
        if (strcmp(word, "default") == 0) continue;
        char *eq = strchr(word, '=');
        size_t f = N_CFG_FIELDS;
        if (eq) {
            *eq = 0;
            for (f = 0; f < N_CFG_FIELDS && strcmp(cfg_fields[f].name, word) != 0; f++) {}
        }
        if (f == N_CFG_FIELDS)
            return kn_error(KN_ERR_ARG, "kernel config '%s': '%s' is not one of block=, ept=, rows=, unroll=, tile=, vec=, lanes=",
                            text, word);
        int v = -1;
        if (cfg_fields[f].off == offsetof(kn_kconfig, rows)) {
            for (int i = 0; i < N_ROWS_NAMES; i++)
                if (strcmp(eq + 1, rows_names[i]) == 0) v = i;
        } else {
            char *end;
            long l = strtol(eq + 1, &end, 10);
            if (*end == 0 && end != eq + 1 && l >= 0 && l <= 4096) v = (int)l;
        }
        bool pow2 = v > 0 && (v & (v - 1)) == 0;
        bool is_block = cfg_fields[f].off == offsetof(kn_kconfig, block);
        bool is_lanes = cfg_fields[f].off == offsetof(kn_kconfig, lanes);
        if (v < 0 || (is_block && v && (!pow2 || v < 32 || v > 1024)) || (is_lanes && v && v != 8 && v != 16 && v != 32))
            return kn_error(KN_ERR_ARG, "kernel config '%s': bad value for %s=%s%s", text, word, eq + 1,
                            is_block ? " (a power of two in 32..1024)"
                            : is_lanes ? " (8, 16 or 32)"
                            : cfg_fields[f].off == offsetof(kn_kconfig, rows) ? " (auto, block, warp, regs or bregs)"
                                                                               : "");
        *(int *)((char *)c + cfg_fields[f].off) = v;
    }
    return KN_OK;
}

int kn_kconfig_candidates(const kn_kernel *k, const kn_render_target *t, kn_kconfig *out, int max)
{
    int n = 0;
    if (max < 1) return 0;
    memset(&out[n++], 0, sizeof *out); /* the default first: every other is measured against it */
    if (k->kind != KN_KERNEL_POINTWISE && k->kind != KN_KERNEL_ROW) return n;
    /* the knobs are the target's: what a layout means is how it renders */
    if (t->candidates) n += t->candidates(k, out + 1, max - 1);
    return n;
}
