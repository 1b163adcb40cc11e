/* kn_onnx: see kn_onnx.h. */
#include "kn_onnx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kn_dtype.h"
#include "kn_hash.h"

/* ---- element types ------------------------------------------------------ */

const char *kn_onnx_type_name(int32_t t)
{
    static const char *const names[] = {"UNDEFINED", "FLOAT",   "UINT8",     "INT8",      "UINT16",
                                        "INT16",     "INT32",   "INT64",     "STRING",    "BOOL",
                                        "FLOAT16",   "DOUBLE",  "UINT32",    "UINT64",    "COMPLEX64",
                                        "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
                                        "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4"};
    if (t >= 0 && (size_t)t < sizeof names / sizeof names[0]) return names[t];
    return "unknown type";
}

int kn_onnx_dtype(int32_t t, kn_dtype *out)
{
    switch (t) {
    case 1: *out = KN_F32; return 1;
    case 6: *out = KN_I32; return 1;
    case 7: *out = KN_I64; return 1;
    case 9: *out = KN_BOOL; return 1;
    case 10: *out = KN_F16; return 1;
    case 11: *out = KN_F64; return 1;
    case 16: *out = KN_BF16; return 1;
    default: return 0;
    }
}

/* ---- external data -------------------------------------------------------- */

/* Read `len` bytes at `offset` of the external file `location` (relative to
 * dir, never leaving it) into dst. */
static kn_status read_external(const char *file, const char *dir, const char *tname,
                               const char *location, int64_t offset, int64_t len, void *dst)
{
    if (!dir)
        return kn_error(KN_ERR_IO, "%s: initializer '%s' has external data, but the model was not read from a file",
                        file, tname);
    if (!location || !location[0] || location[0] == '/' || strstr(location, ".."))
        return kn_error(KN_ERR_FORMAT, "%s: initializer '%s': external data location '%s' must be a path inside the model's folder",
                        file, tname, location ? location : "");
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, location) >= sizeof path)
        return kn_error(KN_ERR_IO, "%s: initializer '%s': external data path too long", file, tname);
    /* a link may still lead out: the resolved path must stay under dir */
    char real_dir[PATH_MAX], real_file[PATH_MAX];
    if (!realpath(path, real_file))
        return kn_error(KN_ERR_IO, "%s: initializer '%s': external data file '%s' cannot be opened: %s", file,
                        tname, location, strerror(errno));
    if (!realpath(dir, real_dir))
        return kn_error(KN_ERR_IO, "%s: the model's folder cannot be resolved: %s", file, strerror(errno));
    size_t dl = strlen(real_dir);
    if (strncmp(real_file, real_dir, dl) != 0 || (real_file[dl] != '/' && dl > 1))
        return kn_error(KN_ERR_FORMAT, "%s: initializer '%s': external data file '%s' lies outside the model's folder",
                        file, tname, location);
    int fd = open(real_file, O_RDONLY);
    if (fd < 0)
        return kn_error(KN_ERR_IO, "%s: initializer '%s': external data file '%s' cannot be opened: %s", file,
                        tname, location, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kn_error(KN_ERR_IO, "%s: initializer '%s': external data '%s' is not a regular file", file, tname,
                        location);
    }
    if (offset < 0 || len < 0 || offset > st.st_size || len > st.st_size - offset) {
        close(fd);
        return kn_error(KN_ERR_FORMAT,
                        "%s: initializer '%s': external data '%s' holds %lld bytes, the tensor needs %lld at offset %lld",
                        file, tname, location, (long long)st.st_size, (long long)len, (long long)offset);
    }
    char *p = dst;
    int64_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, p + done, (size_t)(len - done), (off_t)(offset + done));
        if (r <= 0) {
            close(fd);
            return kn_error(KN_ERR_IO, "%s: initializer '%s': reading external data '%s' failed", file, tname,
                            location);
        }
        done += r;
    }
    close(fd);
    return KN_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

kn_status kn_onnx_tensor(const Onnx__TensorProto *tp, const char *file, const char *dir, kn_tensor **out)
{
    *out = NULL;
    const char *tname = tp->name && tp->name[0] ? tp->name : "(unnamed)";
    kn_dtype dt;
    if (!kn_onnx_dtype(tp->data_type, &dt))
        return kn_error(KN_ERR_UNSUPPORTED, "%s: tensor '%s' has element type %s, which kiln does not support",
                        file, tname, kn_onnx_type_name(tp->data_type));
    if (tp->n_dims > KN_MAX_DIMS)
        return kn_error(KN_ERR_UNSUPPORTED, "%s: tensor '%s' has %zu dims; kiln supports at most %d", file, tname,
                        tp->n_dims, KN_MAX_DIMS);
    int64_t shape[KN_MAX_DIMS];
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%s' has a negative dim %lld", file, tname,
                            (long long)tp->dims[i]);
        shape[i] = tp->dims[i];
    }
    char what[160];
    snprintf(what, sizeof what, "%s: tensor '%s'", file, tname);
    KN_TRY(kn_shape_check(what, (int)tp->n_dims, shape, dt));
    int64_t n = kn_numel_of((int)tp->n_dims, shape);
    size_t es = kn_dtype_size(dt);
    int64_t bytes = n * (int64_t)es;

    /* where the data is, and that it is exactly the size shape and type say */
    int external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    const char *location = NULL;
    int64_t ext_offset = 0, ext_length = -1;
    size_t typed = 0;
    const char *typed_field = NULL;
    if (external) {
        for (size_t i = 0; i < tp->n_external_data; i++) {
            const Onnx__StringStringEntryProto *e = tp->external_data[i];
            if (!e->key || !e->value) continue;
            char *end;
            if (strcmp(e->key, "location") == 0) location = e->value;
            else if (strcmp(e->key, "offset") == 0 || strcmp(e->key, "length") == 0) {
                errno = 0;
                long long v = strtoll(e->value, &end, 10);
                if (errno || *end || v < 0)
                    return kn_error(KN_ERR_FORMAT, "%s: tensor '%s': external data %s '%s' is not a size", file,
                                    tname, e->key, e->value);
                if (e->key[0] == 'o') ext_offset = v;
                else ext_length = v;
            }
        }
        if (ext_length >= 0 && ext_length != bytes)
            return kn_error(KN_ERR_FORMAT,
                            "%s: tensor '%s' declares %lld bytes of external data, but its shape and type need %lld",
                            file, tname, (long long)ext_length, (long long)bytes);
    } else if (tp->has_raw_data) {
        if ((int64_t)tp->raw_data.len != bytes)
            return kn_error(KN_ERR_FORMAT,
                            "%s: tensor '%s' holds %zu bytes, but its shape and type (%s) need %lld", file, tname,
                            tp->raw_data.len, kn_onnx_type_name(tp->data_type), (long long)bytes);
    } else {
        switch (dt) {
        case KN_F32: typed = tp->n_float_data, typed_field = "float_data"; break;
        case KN_F64: typed = tp->n_double_data, typed_field = "double_data"; break;
        case KN_I64: typed = tp->n_int64_data, typed_field = "int64_data"; break;
        default: typed = tp->n_int32_data, typed_field = "int32_data"; break;
        }
        if ((int64_t)typed != n)
            return kn_error(KN_ERR_FORMAT, "%s: tensor '%s' holds %zu values in %s, but its shape needs %lld", file,
                            tname, typed, typed_field, (long long)n);
    }

    kn_tensor *t;
    KN_TRY(kn_tensor_new(dt, (int)tp->n_dims, shape, KN_CPU, &t));
    char *dst = kn_tensor_data(t);
    kn_status st = KN_OK;
    if (external) {
        st = read_external(file, dir, tname, location, ext_offset, bytes, dst);
    } else if (tp->has_raw_data) {
        if (bytes) memcpy(dst, tp->raw_data.data, (size_t)bytes); /* little-endian, as kiln's hosts */
    } else {
        for (int64_t i = 0; i < n; i++) {
            switch (dt) {
            case KN_F32: ((float *)dst)[i] = tp->float_data[i]; break;
            case KN_F64: ((double *)dst)[i] = tp->double_data[i]; break;
            case KN_I64: ((int64_t *)dst)[i] = tp->int64_data[i]; break;
            case KN_I32: ((int32_t *)dst)[i] = tp->int32_data[i]; break;
            case KN_BOOL: ((uint8_t *)dst)[i] = tp->int32_data[i] != 0; break;
            /* halves are stored as their bit patterns in int32_data */
            case KN_F16:
            case KN_BF16: ((uint16_t *)dst)[i] = (uint16_t)tp->int32_data[i]; break;
            default: break;
            }
        }
    }
    if (st == KN_OK && dt == KN_BOOL) /* a bool byte other than 0/1 would read as neither */
        for (int64_t i = 0; i < n; i++) dst[i] = dst[i] != 0;
    if (st != KN_OK) {
        kn_tensor_release(t);
        return st;
    }
    *out = t;
    return KN_OK;
}

/* ---- a string set (names of a graph's values) ---------------------------- */

typedef struct {
    const char **keys;
    size_t cap, n;
} name_set;

static size_t set_slot(const name_set *s, const char *k)
{
    size_t i = (size_t)kn_hash_str(0xcbf29ce484222325ULL, k) & (s->cap - 1);
    while (s->keys[i] && strcmp(s->keys[i], k) != 0) i = (i + 1) & (s->cap - 1);
    return i;
}

static kn_status set_init(name_set *s, size_t expect)
{
    s->cap = 16;
    while (s->cap < expect * 2 + 2) s->cap *= 2;
    s->n = 0;
    s->keys = calloc(s->cap, sizeof *s->keys);
    return s->keys ? KN_OK : kn_error(KN_ERR_OOM, "onnx: out of memory");
}

/* A name a malformed file leaves out (NULL) is in no set; graph_load
 * refuses it where a name is required. */
static int set_has(const name_set *s, const char *k) { return k && s->keys[set_slot(s, k)] != NULL; }

static kn_status set_add(name_set *s, const char *k)
{
    if (!k) return KN_OK;
    if (s->n * 2 + 2 > s->cap) {
        name_set bigger;
        KN_TRY(set_init(&bigger, s->cap));
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i]) bigger.keys[set_slot(&bigger, s->keys[i])] = s->keys[i], bigger.n++;
        free(s->keys);
        *s = bigger;
    }
    size_t i = set_slot(s, k);
    if (!s->keys[i]) s->keys[i] = k, s->n++;
    return KN_OK;
}

/* ---- graphs ------------------------------------------------------------------ */

static void graph_free(kn_onnx_graph *g)
{
    if (!g) return;
    if (g->initializers)
        for (size_t i = 0; i < g->proto->n_initializer; i++) kn_tensor_release(g->initializers[i]);
    free(g->initializers);
    if (g->subgraphs) {
        for (size_t i = 0; i < g->proto->n_node; i++) {
            if (!g->subgraphs[i]) continue;
            for (size_t j = 0; j < g->proto->node[i]->n_attribute; j++) graph_free(g->subgraphs[i][j]);
            free(g->subgraphs[i]);
        }
        free(g->subgraphs);
    }
    free(g->order);
    free(g);
}

/* Add every name a subgraph reads from its enclosing scopes to `used`. */
static kn_status subgraph_outer_uses(const Onnx__GraphProto *sg, name_set *used, int depth)
{
    if (depth > 32) return kn_error(KN_ERR_FORMAT, "onnx: subgraphs nested more than 32 deep");
    name_set local;
    KN_TRY(set_init(&local, sg->n_node + sg->n_input + sg->n_initializer));
    kn_status st = KN_OK;
    for (size_t i = 0; i < sg->n_input && st == KN_OK; i++) st = set_add(&local, sg->input[i]->name);
    for (size_t i = 0; i < sg->n_initializer && st == KN_OK; i++) st = set_add(&local, sg->initializer[i]->name);
    for (size_t i = 0; i < sg->n_node && st == KN_OK; i++)
        for (size_t j = 0; j < sg->node[i]->n_output && st == KN_OK; j++) st = set_add(&local, sg->node[i]->output[j]);
    for (size_t i = 0; i < sg->n_node && st == KN_OK; i++) {
        const Onnx__NodeProto *nd = sg->node[i];
        for (size_t j = 0; j < nd->n_input && st == KN_OK; j++)
            if (nd->input[j][0] && !set_has(&local, nd->input[j])) st = set_add(used, nd->input[j]);
        /* what nested subgraphs read from outside them, less what this one defines */
        name_set nested;
        if (st == KN_OK) st = set_init(&nested, 8);
        if (st != KN_OK) break;
        for (size_t a = 0; a < nd->n_attribute && st == KN_OK; a++) {
            const Onnx__AttributeProto *at = nd->attribute[a];
            if (at->g) st = subgraph_outer_uses(at->g, &nested, depth + 1);
            for (size_t k = 0; k < at->n_graphs && st == KN_OK; k++)
                st = subgraph_outer_uses(at->graphs[k], &nested, depth + 1);
        }
        for (size_t k = 0; k < nested.cap && st == KN_OK; k++)
            if (nested.keys[k] && !set_has(&local, nested.keys[k])) st = set_add(used, nested.keys[k]);
        free(nested.keys);
    }
    for (size_t i = 0; i < sg->n_output && st == KN_OK; i++)
        if (!set_has(&local, sg->output[i]->name)) st = set_add(used, sg->output[i]->name);
    free(local.keys);
    return st;
}

static kn_status graph_load(const char *file, const char *dir, const Onnx__GraphProto *gp, const name_set *outer,
                            int depth, kn_onnx_graph **out);

/* The names the node reads: its inputs and what its subgraphs read from outside. */
static kn_status node_reads(const Onnx__NodeProto *nd, name_set *reads)
{
    for (size_t j = 0; j < nd->n_input; j++)
        if (nd->input[j][0]) KN_TRY(set_add(reads, nd->input[j]));
    for (size_t a = 0; a < nd->n_attribute; a++) {
        const Onnx__AttributeProto *at = nd->attribute[a];
        if (at->g) KN_TRY(subgraph_outer_uses(at->g, reads, 1));
        for (size_t k = 0; k < at->n_graphs; k++) KN_TRY(subgraph_outer_uses(at->graphs[k], reads, 1));
    }
    return KN_OK;
}

static const char *node_label(const Onnx__NodeProto *nd, size_t i, char *buf, size_t size)
{
    if (nd->name && nd->name[0]) snprintf(buf, size, "'%s' (%s)", nd->name, nd->op_type ? nd->op_type : "?");
    else snprintf(buf, size, "#%zu (%s)", i, nd->op_type ? nd->op_type : "?");
    return buf;
}

/* Sort the nodes topologically (Kahn), checking every read is defined. */
static kn_status graph_order(const char *file, const Onnx__GraphProto *gp, const name_set *defined_outside,
                             size_t *order)
{
    size_t n = gp->n_node;
    kn_status st = KN_OK;
    name_set produced, outer_here;
    KN_TRY(set_init(&produced, n * 2 + 4));
    st = set_init(&outer_here, gp->n_input + gp->n_initializer + 4);
    if (st != KN_OK) {
        free(produced.keys);
        return st;
    }
    for (size_t i = 0; i < n && st == KN_OK; i++)
        for (size_t j = 0; j < gp->node[i]->n_output && st == KN_OK; j++)
            if (gp->node[i]->output[j][0]) st = set_add(&produced, gp->node[i]->output[j]);
    for (size_t i = 0; i < gp->n_input && st == KN_OK; i++) st = set_add(&outer_here, gp->input[i]->name);
    for (size_t i = 0; i < gp->n_initializer && st == KN_OK; i++) st = set_add(&outer_here, gp->initializer[i]->name);

    char *done = calloc(n + 1, 1);
    name_set avail = {0};
    if (st == KN_OK && !done) st = kn_error(KN_ERR_OOM, "onnx: out of memory");
    if (st == KN_OK) st = set_init(&avail, n * 2 + 4);
    size_t placed = 0;
    /* O(n^2) at worst, O(n) passes for a graph already in order */
    while (st == KN_OK && placed < n) {
        size_t before = placed;
        for (size_t i = 0; i < n && st == KN_OK; i++) {
            if (done[i]) continue;
            name_set reads;
            st = set_init(&reads, 8);
            if (st == KN_OK) st = node_reads(gp->node[i], &reads);
            int ready = 1;
            for (size_t k = 0; st == KN_OK && k < reads.cap && ready; k++) {
                const char *r = reads.keys[k];
                if (!r) continue;
                if (set_has(&avail, r) || set_has(&outer_here, r)) continue;
                if (set_has(&produced, r)) {
                    ready = 0;
                    continue;
                }
                if (defined_outside && set_has(defined_outside, r)) continue;
                char lb[200];
                st = kn_error(KN_ERR_FORMAT, "%s: node %s reads '%s', which no node, input or initializer defines",
                              file, node_label(gp->node[i], i, lb, sizeof lb), r);
            }
            free(reads.keys);
            if (st != KN_OK || !ready) continue;
            done[i] = 1;
            order[placed++] = i;
            for (size_t j = 0; j < gp->node[i]->n_output && st == KN_OK; j++)
                if (gp->node[i]->output[j][0]) st = set_add(&avail, gp->node[i]->output[j]);
        }
        if (st == KN_OK && placed == before) {
            size_t first = 0;
            while (done[first]) first++;
            char lb[200];
            st = kn_error(KN_ERR_FORMAT, "%s: the graph has a cycle: node %s depends on its own output", file,
                          node_label(gp->node[first], first, lb, sizeof lb));
        }
    }
    free(avail.keys);
    free(done);
    free(produced.keys);
    free(outer_here.keys);
    return st;
}

static kn_status graph_load(const char *file, const char *dir, const Onnx__GraphProto *gp, const name_set *outer,
                            int depth, kn_onnx_graph **out)
{
    *out = NULL;
    if (depth > 32) return kn_error(KN_ERR_FORMAT, "%s: subgraphs nested more than 32 deep", file);
    kn_onnx_graph *g = calloc(1, sizeof *g);
    if (!g) return kn_error(KN_ERR_OOM, "onnx: out of memory");
    g->proto = gp;
    g->order = calloc(gp->n_node + 1, sizeof *g->order);
    g->initializers = calloc(gp->n_initializer + 1, sizeof *g->initializers);
    g->subgraphs = calloc(gp->n_node + 1, sizeof *g->subgraphs);
    kn_status st = (g->order && g->initializers && g->subgraphs) ? KN_OK : kn_error(KN_ERR_OOM, "onnx: out of memory");
    for (size_t i = 0; i < gp->n_node && st == KN_OK; i++) {
        const Onnx__NodeProto *nd = gp->node[i];
        if (!nd->op_type || !nd->op_type[0]) {
            char lb[200];
            st = kn_error(KN_ERR_FORMAT, "%s: node %s has no op type", file, node_label(nd, i, lb, sizeof lb));
        }
    }
    for (size_t i = 0; i < gp->n_input && st == KN_OK; i++)
        if (!gp->input[i]->name || !gp->input[i]->name[0])
            st = kn_error(KN_ERR_FORMAT, "%s: graph input %zu has no name", file, i + 1);
    for (size_t i = 0; i < gp->n_output && st == KN_OK; i++)
        if (!gp->output[i]->name || !gp->output[i]->name[0])
            st = kn_error(KN_ERR_FORMAT, "%s: graph output %zu has no name", file, i + 1);
    for (size_t i = 0; i < gp->n_initializer && st == KN_OK; i++)
        if (!gp->initializer[i]->name || !gp->initializer[i]->name[0])
            st = kn_error(KN_ERR_FORMAT, "%s: initializer %zu has no name", file, i + 1);
    if (st == KN_OK) st = graph_order(file, gp, outer, g->order);
    for (size_t i = 0; i < gp->n_initializer && st == KN_OK; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        st = kn_onnx_tensor(tp, file, dir, &g->initializers[i]);
        /* the decoded bytes are in the kn_tensor now: drop them, so a large
         * model is not held twice */
        if (st == KN_OK && tp->has_raw_data && tp->raw_data.data) {
            free(tp->raw_data.data);
            tp->raw_data.data = NULL;
            tp->raw_data.len = 0;
            tp->has_raw_data = 0;
        }
    }
    /* subgraphs see this graph's names and everything outside */
    name_set scope = {0};
    if (st == KN_OK) st = set_init(&scope, gp->n_node * 2 + gp->n_input + gp->n_initializer + 4);
    if (st == KN_OK && outer)
        for (size_t k = 0; k < outer->cap && st == KN_OK; k++)
            if (outer->keys[k]) st = set_add(&scope, outer->keys[k]);
    for (size_t i = 0; i < gp->n_input && st == KN_OK; i++) st = set_add(&scope, gp->input[i]->name);
    for (size_t i = 0; i < gp->n_initializer && st == KN_OK; i++) st = set_add(&scope, gp->initializer[i]->name);
    for (size_t i = 0; i < gp->n_node && st == KN_OK; i++)
        for (size_t j = 0; j < gp->node[i]->n_output && st == KN_OK; j++) st = set_add(&scope, gp->node[i]->output[j]);
    for (size_t i = 0; i < gp->n_node && st == KN_OK; i++) {
        const Onnx__NodeProto *nd = gp->node[i];
        for (size_t a = 0; a < nd->n_attribute && st == KN_OK; a++) {
            if (!nd->attribute[a]->g) continue;
            if (!g->subgraphs[i]) {
                g->subgraphs[i] = calloc(nd->n_attribute, sizeof **g->subgraphs);
                if (!g->subgraphs[i]) {
                    st = kn_error(KN_ERR_OOM, "onnx: out of memory");
                    break;
                }
            }
            st = graph_load(file, dir, nd->attribute[a]->g, &scope, depth + 1, &g->subgraphs[i][a]);
        }
    }
    free(scope.keys);
    if (st != KN_OK) {
        graph_free(g);
        return st;
    }
    *out = g;
    return KN_OK;
}

/* ---- models ------------------------------------------------------------------ */

void kn_onnx_free(kn_onnx_model *m)
{
    if (!m) return;
    graph_free(m->graph);
    if (m->proto) onnx__model_proto__free_unpacked(m->proto, NULL);
    free(m->path);
    free(m);
}

/* A mapped file, unmapped as soon as the decoded message holds its bytes. */
typedef struct {
    void *map;
    size_t size;
} mapped_bytes;

static void unmap_bytes(mapped_bytes *mb)
{
    if (mb && mb->map) munmap(mb->map, mb->size);
    if (mb) mb->map = NULL;
}

/* Decode and check data; `mapped` (may be NULL) is unmapped right after
 * decoding: protobuf-c copies every field out of the buffer, so the file's
 * pages and the initializers' tensors are never resident together. */
static kn_status load_bytes(const void *data, size_t size, const char *name, const char *dir, mapped_bytes *mapped,
                            kn_onnx_model **out)
{
    *out = NULL;
    if (size == 0) return kn_error(KN_ERR_FORMAT, "%s: the file is empty, not an ONNX model", name);
    kn_onnx_model *m = calloc(1, sizeof *m);
    if (!m) {
        unmap_bytes(mapped);
        return kn_error(KN_ERR_OOM, "onnx: out of memory");
    }
    m->path = strdup(name);
    m->proto = onnx__model_proto__unpack(NULL, size, data);
    unmap_bytes(mapped);
    kn_status st = KN_OK;
    if (!m->path) st = kn_error(KN_ERR_OOM, "onnx: out of memory");
    else if (!m->proto)
        st = kn_error(KN_ERR_FORMAT, "%s: not an ONNX model (the file is truncated, corrupt or another format)",
                      name);
    else if (!m->proto->graph)
        st = kn_error(KN_ERR_FORMAT, "%s: not an ONNX model (no graph in it)", name);
    if (st == KN_OK) {
        m->opset = -1;
        for (size_t i = 0; i < m->proto->n_opset_import; i++) {
            const Onnx__OperatorSetIdProto *o = m->proto->opset_import[i];
            if (!o->domain || !o->domain[0] || strcmp(o->domain, "ai.onnx") == 0) m->opset = o->version;
        }
        if (m->opset < 0 && m->proto->n_opset_import == 0 && m->proto->has_ir_version && m->proto->ir_version < 3)
            m->opset = 1; /* IR v1/v2 models predate opset imports */
        if (m->opset < 0)
            st = kn_error(KN_ERR_UNSUPPORTED,
                          "%s: unsupported: the model imports no version of the default ONNX opset (only other domains, which kiln does not implement)",
                          name);
        else if (m->opset > KN_ONNX_MAX_OPSET)
            st = kn_error(KN_ERR_UNSUPPORTED, "%s: the model uses ONNX opset %lld; kiln knows opsets up to %d", name,
                          (long long)m->opset, KN_ONNX_MAX_OPSET);
    }
    if (st == KN_OK) st = graph_load(name, dir, m->proto->graph, NULL, 0, &m->graph);
    if (st != KN_OK) {
        kn_onnx_free(m);
        return st;
    }
    *out = m;
    return KN_OK;
}

kn_status kn_onnx_load_bytes(const void *data, size_t size, const char *name, const char *dir,
                             kn_onnx_model **out)
{
    return load_bytes(data, size, name, dir, NULL, out);
}

/* Map a regular file read-only; *size 0 and *map NULL for an empty one. */
static kn_status map_file(const char *path, void **map, size_t *size)
{
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kn_error(KN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kn_error(KN_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return kn_error(KN_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        }
        *map = p;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return KN_OK;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

kn_status kn_onnx_load(const char *path, kn_onnx_model **out)
{
    *out = NULL;
    void *map;
    size_t size;
    KN_TRY(map_file(path, &map, &size));
    mapped_bytes mapped = {map, size};
    char *dir = dir_of(path);
    kn_status st = dir ? load_bytes(map, size, path, dir, &mapped, out) : kn_error(KN_ERR_OOM, "onnx: out of memory");
    free(dir);
    unmap_bytes(&mapped); /* when load_bytes did not (no memory for dir) */
    return st;
}

kn_status kn_onnx_read_tensor_file(const char *path, kn_tensor **out, char **name)
{
    *out = NULL;
    if (name) *name = NULL;
    void *map;
    size_t size;
    KN_TRY(map_file(path, &map, &size));
    /* an empty message is a valid (empty) TensorProto: refuse it as no tensor */
    Onnx__TensorProto *tp = size ? onnx__tensor_proto__unpack(NULL, size, map) : NULL;
    if (map) munmap(map, size);
    if (!tp) return kn_error(KN_ERR_FORMAT, "%s: not a serialized ONNX TensorProto (truncated or corrupt)", path);
    char *dir = dir_of(path);
    kn_status st = dir ? kn_onnx_tensor(tp, path, dir, out) : kn_error(KN_ERR_OOM, "onnx: out of memory");
    free(dir);
    if (st == KN_OK && name) {
        *name = strdup(tp->name ? tp->name : "");
        if (!*name) {
            kn_tensor_release(*out);
            *out = NULL;
            st = kn_error(KN_ERR_OOM, "onnx: out of memory");
        }
    }
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return st;
}
