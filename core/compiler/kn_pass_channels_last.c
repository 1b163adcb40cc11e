/* kn_pass_channels_last: the layout pass. Convolutions run channels-last
 * (NHWC) where the plan's device runs them faster so: cuDNN's tensor-core
 * engines read and write NHWC, and an NCHW half-precision convolution
 * costs them transposes inside the library (convnet bf16 on the H100: its
 * four convs at 10-13% of their roofline).
 *
 * The graph says it explicitly, so every later step (fusion, epilogues,
 * kernels, drawings) sees plain contiguous values:
 *
 *   y = conv2d(x, w, b)                          NCHW, as captured
 * becomes
 *   t = conv2d[in NCHW, out NHWC](x, w', b)      t {N, P, Q, K} contiguous
 *   y = permute(t, {0, 3, 1, 2})                 a view: NCHW dims, NHWC bytes
 *
 * with w' the weight as {K, kh, kw, Cp}, its channels zero-padded to 16
 * bytes (Cp: 8 halves or 4 floats) so that the engines' vector loads line
 * up; the backend pads and transposes x itself at the chain's entry (the
 * first layer's 3 image channels become 8), except for a patch embedding
 * (kernel = stride), which the backends run as a GEMM over the input's
 * own channels. Then:
 * - a conv whose input is such a view reads t directly (in NHWC): a chain
 *   of convs converts once at its entry;
 * - an elementwise op (ReLU, an add of a residual or a per-channel bias)
 *   that reads such a view runs on t instead, and its result is the view
 *   again: the ReLU stays next to its conv, where the plan folds it into
 *   the cuDNN call, and a residual add stays NHWC;
 * - a BatchNorm (a training step's: its statistics are the batch's)
 *   that normalizes such a view runs on t with its channels last, and its
 *   result is the view again;
 * - conv2d's gradients (a training step's backward) run NHWC, reading
 *   such views' NHWC values (other operands permuted and copied), and the
 *   input's gradient is a view again;
 * - a pool that reads such a view runs channels-last too (in and out
 *   NHWC) and its result is the view again, so a stem's max pool does not
 *   end the chain; a mean over H and W (a global average pool as the
 *   exporters write it) becomes a global average pool of t;
 * - an elementwise op may also read a view broadcast up to its shape (a
 *   squeeze-excitation's {N, C, 1, 1} scale): in NHWC order that value is
 *   {N, 1, 1, C}, which broadcasts the same way;
 * - anything else (a reshape, a caller output) reads the NCHW view
 *   through its strides: that is where the chain ends, without a copy
 *   unless the reader itself needs one.
 *
 * A weight that is a parameter (or a pass-made fold, such as batch norm's
 * folded weight) is laid out now, once, on its device; the plan notices a
 * parameter written in place later (kn_plan_stale) and builds again. An
 * argument weight is permuted by nodes at every call, without padding.
 * Which dtypes convert is the caller's choice (flags KN_PASSES_NHWC_*,
 * from the backend's answer or kiln.config.channels_last); every decision
 * goes to the pass notes (KILN_LOGS=fusion).
 */
#include "kn_pass_channels_last.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_pass_flags.h"
#include "kn_settings.h"
#include "kn_view.h"

typedef struct cl_ctx {
    kn_pass_ctx *x;
    int *view_node, *nhwc_ref; /* the views this pass made and the NHWC value each shows */
    int n, cap;
} cl_ctx;

static const int to_nchw[4] = {0, 3, 1, 2};
static const int to_nhwc[4] = {0, 2, 3, 1};

static int nhwc_behind(const cl_ctx *c, int node)
{
    for (int k = 0; k < c->n; k++)
        if (c->view_node[k] == node) return c->nhwc_ref[k];
    return -1;
}

static kn_status remember_view(cl_ctx *c, int view, int nhwc_ref)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        int *a = realloc(c->view_node, sizeof *a * (size_t)cap);
        if (!a) return kn_error(KN_ERR_OOM, "channels_last: out of host memory");
        c->view_node = a;
        int *b = realloc(c->nhwc_ref, sizeof *b * (size_t)cap);
        if (!b) return kn_error(KN_ERR_OOM, "channels_last: out of host memory");
        c->nhwc_ref = b;
        c->cap = cap;
    }
    c->view_node[c->n] = view;
    c->nhwc_ref[c->n] = nhwc_ref;
    c->n++;
    return KN_OK;
}

static bool dtype_converts(int flags, kn_dtype dt)
{
    if (dt == KN_BF16 || dt == KN_F16) return flags & KN_PASSES_NHWC_HALF;
    return dt == KN_F32 && (flags & KN_PASSES_NHWC_F32);
}

/* Whether g is (part of) a training step: it has backward or update ops. */
/* w {K, Cg, kh, kw} (any layout, any device: a copy to make it contiguous
 * runs with settings) as a new contiguous {K, kh, kw, cp} on w's device,
 * channels Cg..cp zero. */
static kn_status weight_khwc(kn_tensor *w, int64_t cp, const kn_settings *settings, kn_tensor **out)
{
    *out = NULL;
    int64_t k = w->shape[0], cg = w->shape[1], r = w->shape[2], s = w->shape[3];
    size_t es = kn_dtype_size(w->dtype);
    kn_tensor *host = NULL, *lay = NULL;
    KN_TRY(kn_tensor_to_device(w, KN_CPU, settings, &host));
    char *raw = malloc((size_t)kn_tensor_numel(host) * es + 1);
    int64_t shape[4] = {k, r, s, cp};
    kn_status st = raw ? kn_tensor_new(w->dtype, 4, shape, KN_CPU, &lay)
                       : kn_error(KN_ERR_OOM, "channels_last: out of host memory for a weight");
    if (st == KN_OK) {
        kn_tensor_gather_host(host, raw);
        char *dst = kn_tensor_data(lay);
        memset(dst, 0, (size_t)kn_tensor_numel(lay) * es); /* +0.0 in every float dtype */
        for (int64_t o = 0; o < k; o++)
            for (int64_t c = 0; c < cg; c++)
                for (int64_t y = 0; y < r; y++)
                    for (int64_t xx = 0; xx < s; xx++)
                        memcpy(dst + (size_t)(((o * r + y) * s + xx) * cp + c) * es,
                               raw + (size_t)(((o * cg + c) * r + y) * s + xx) * es, es);
        kn_device dev = kn_tensor_device(w);
        if (dev == KN_CPU) {
            *out = lay;
            lay = NULL;
        } else {
            st = kn_tensor_to_device(lay, dev, NULL, out); /* contiguous: no kernel runs */
        }
    }
    free(raw);
    kn_tensor_release(host);
    kn_tensor_release(lay);
    return st;
}

/* Append node `op` and give it the replaced node's source line and part
 * (forward, backward, update), so that kernels, messages, drawings and
 * :time's part column name the user's code where it was. */
static kn_status append_like(kn_pass_ctx *x, int op, const int *refs, int n, const kn_attrs *a, int like, int *out)
{
    char where[KN_WHERE_MAX];
    memcpy(where, x->g->nodes[like].where, sizeof where);
    KN_TRY(kn_pass_append_node(x, op, refs, n, a, like, where, out));
    x->g->nodes[*out].part = x->g->nodes[like].part;
    return KN_OK;
}

static kn_status append_permute(kn_pass_ctx *x, int ref, const int dims[4], int like, int *out)
{
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_PERMUTE);
    kn_attrs a = init.a;
    a.ndims = 4;
    for (int d = 0; d < 4; d++) a.dims[d] = dims[d];
    return append_like(x, KN_OP_PERMUTE, &ref, 1, &a, like, out);
}

/* ref (NCHW {N, C, H, W}, or a weight {K, C, kh, kw}) as a contiguous
 * channels-last value: this pass's NHWC value where ref is one of its
 * views, else a permute and a copy. */
static kn_status nhwc_operand(cl_ctx *c, int ref, int like, int *out)
{
    int src = nhwc_behind(c, KN_REF_NODE(ref));
    if (src >= 0 && KN_REF_OUT(ref) == 0) {
        *out = src;
        return KN_OK;
    }
    int perm, copy;
    KN_TRY(append_permute(c->x, ref, to_nhwc, like, &perm));
    int pref = KN_REF(perm, 0);
    KN_TRY(append_like(c->x, KN_OP_CONTIGUOUS, &pref, 1, NULL, like, &copy));
    *out = KN_REF(copy, 0);
    return KN_OK;
}

/* The NHWC weight of conv node i: a fixed value laid out now, or nodes
 * that permute an argument at every call. */
static kn_status nhwc_weight(cl_ctx *c, int i, int64_t cp, int *ref, bool *padded)
{
    kn_pass_ctx *x = c->x;
    kn_graph *g = x->g;
    const kn_node *conv = &g->nodes[i];
    int wn = conv->in_node[1], wo = conv->in_out[1];
    kn_tensor *w = kn_pass_fixed_value(g, wn, wo);
    *padded = false;
    if (w && w->ndim == 4) {
        kn_tensor *lay;
        KN_TRY(weight_khwc(w, cp, x->settings, &lay));
        char where[KN_WHERE_MAX];
        memcpy(where, conv->where, sizeof where);
        int node;
        kn_status st = kn_pass_add_folded_value(x, "channels-last conv weight", lay, where, i, &node);
        kn_tensor_release(lay);
        KN_TRY(st);
        *ref = KN_REF(node, 0);
        *padded = cp > w->shape[1];
        return KN_OK;
    }
    return nhwc_operand(c, KN_REF(wn, wo), i, ref);
}

static kn_status convert_conv(cl_ctx *c, int i)
{
    kn_pass_ctx *x = c->x;
    kn_graph *g = x->g;
    char who[200];
    const kn_node *conv = &g->nodes[i];
    kn_dtype dt = conv->out[0].dtype;
    const kn_meta *xm = &g->nodes[conv->in_node[0]].out[conv->in_out[0]];
    const kn_meta *wm = &g->nodes[conv->in_node[1]].out[conv->in_out[1]];
    if (conv->a.in_layout != KN_LAYOUT_NCHW || conv->a.out_layout != KN_LAYOUT_NCHW) return KN_OK;
    if (!dtype_converts(x->flags, dt) || xm->dtype != dt || wm->dtype != dt) {
        if (kn_dtype_is_float(dt) && (x->flags & (KN_PASSES_NHWC_HALF | KN_PASSES_NHWC_F32)))
            kn_pass_note(x, "channels_last: %s stays NCHW: %s%s", kn_pass_who(g, i, who, sizeof who),
                         xm->dtype != dt || wm->dtype != dt ? "its input and weight are not all " : "the device runs ",
                         xm->dtype != dt || wm->dtype != dt ? kn_dtype_name(dt)
                                                            : (dt == KN_F64 ? "f64 convolutions NCHW"
                                                                            : "this dtype's convolutions faster NCHW"));
        return KN_OK;
    }
    if (xm->ndim != 4 || conv->out[0].ndim != 4) {
        kn_pass_note(x, "channels_last: %s stays NCHW: its input has %d dims, not {N, C, H, W}",
                     kn_pass_who(g, i, who, sizeof who), xm->ndim);
        return KN_OK;
    }
    int64_t mult = 16 / (int64_t)kn_dtype_size(dt), cg = wm->shape[1];
    /* a patch embedding runs as a GEMM over its windows, whose rows are
     * the input's channels as they are: its weight stays unpadded */
    bool patches = wm->ndim == 4 && kn_conv_is_patch_embedding(&conv->a, wm->shape[2], wm->shape[3]);
    int64_t cp = conv->a.groups == 1 && !patches ? (cg + mult - 1) / mult * mult : cg;
    int src = nhwc_behind(c, conv->in_node[0]);
    bool padded = false;
    int wref;
    KN_TRY(nhwc_weight(c, i, cp, &wref, &padded));
    g = x->g;
    conv = &g->nodes[i];
    kn_attrs a = conv->a;
    a.out_layout = KN_LAYOUT_NHWC;
    a.in_layout = src >= 0 ? KN_LAYOUT_NHWC : KN_LAYOUT_NCHW;
    int refs[3] = {src >= 0 ? src : KN_REF(conv->in_node[0], conv->in_out[0]), wref,
                   conv->n_in > 2 ? KN_REF(conv->in_node[2], conv->in_out[2]) : -1};
    int nc, view;
    KN_TRY(append_like(x, KN_OP_CONV2D, refs, conv->n_in, &a, i, &nc));
    KN_TRY(append_permute(x, KN_REF(nc, 0), to_nchw, i, &view));
    g = x->g;
    memcpy(g->nodes[nc].covers, g->nodes[i].covers, sizeof g->nodes[nc].covers);
    if (!kn_pass_replace(x, i, KN_REF(view, 0))) return KN_OK;
    KN_TRY(remember_view(c, view, KN_REF(nc, 0)));
    char pad[96] = "";
    if (padded)
        snprintf(pad, sizeof pad, ", its %lld input channels padded to %lld", (long long)cg, (long long)cp);
    kn_pass_note(x, "channels_last: %s runs NHWC (%s%s)", kn_pass_who(g, i, who, sizeof who),
                 src >= 0 ? "reads the NHWC value of the conv chain before it" : "converts its NCHW input: a chain starts",
                 pad);
    return KN_OK;
}

/* x {N, C, H, W} (C not whole 16-byte vectors: an image's 3) as a new
 * contiguous {N, H, W, cp}, its channels C..cp zero: the permuted x and a
 * zero block joined along the channels. The zero block is one zero
 * expanded (strides 0), so the cat reads 2 bytes of it, not 5 of every
 * pixel's 8 channels (16 of the padded image's 41 MB of traffic). */
static kn_status nhwc_padded(cl_ctx *c, int ref, int64_t cp, int like, int *out)
{
    kn_pass_ctx *x = c->x;
    const kn_meta *m = &x->g->nodes[KN_REF_NODE(ref)].out[KN_REF_OUT(ref)];
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_FULL);
    kn_attrs fa = init.a;
    fa.nshape = 4;
    fa.shape[0] = fa.shape[1] = fa.shape[2] = fa.shape[3] = 1;
    fa.value = 0;
    fa.dtype = m->dtype;
    kn_opcall_init(&init, KN_OP_EXPAND);
    kn_attrs ea = init.a;
    ea.nshape = 4;
    ea.shape[0] = m->shape[0];
    ea.shape[1] = m->shape[2];
    ea.shape[2] = m->shape[3];
    ea.shape[3] = cp - m->shape[1];
    int perm, zero, zeros, cat;
    KN_TRY(append_permute(x, ref, to_nhwc, like, &perm));
    KN_TRY(append_like(x, KN_OP_FULL, NULL, 0, &fa, like, &zero));
    int zref = KN_REF(zero, 0);
    KN_TRY(append_like(x, KN_OP_EXPAND, &zref, 1, &ea, like, &zeros));
    kn_opcall_init(&init, KN_OP_CAT);
    kn_attrs ca = init.a;
    ca.dim = 3;
    int parts[2] = {KN_REF(perm, 0), KN_REF(zeros, 0)};
    KN_TRY(append_like(x, KN_OP_CAT, parts, 2, &ca, like, &cat));
    *out = KN_REF(cat, 0);
    return KN_OK;
}

/* The weight's gradient of a conv whose input channels are not whole
 * 16-byte vectors (the first layer's image), channels-last: x padded with
 * zero channels to cp, the gradient {K, kh, kw, cp} (the padded channels'
 * are sums of products with zeros), its first cin channels viewed NCHW.
 * Left NCHW, cuDNN's gradient of the convnet sample's first conv took 216
 * us (3% of the roofline, bf16, H200) after a 57 us copy of dy to NCHW. */
static kn_status padded_weight_grad(cl_ctx *c, int i, int64_t cin, int64_t cp)
{
    kn_pass_ctx *x = c->x;
    int xr, gr, gn, sl, view;
    KN_TRY(nhwc_padded(c, KN_REF(x->g->nodes[i].in_node[0], x->g->nodes[i].in_out[0]), cp, i, &xr));
    KN_TRY(nhwc_operand(c, KN_REF(x->g->nodes[i].in_node[1], x->g->nodes[i].in_out[1]), i, &gr));
    const kn_node *n = &x->g->nodes[i];
    kn_attrs a = n->a;
    a.in_layout = a.out_layout = KN_LAYOUT_NHWC;
    for (int d = 0; d < 4; d++) a.shape[d] = n->a.shape[to_nhwc[d]];
    a.shape[3] = cp;
    int refs[2] = {xr, gr};
    KN_TRY(append_like(x, n->op, refs, 2, &a, i, &gn));
    kn_opcall init;
    kn_opcall_init(&init, KN_OP_SLICE);
    kn_attrs sa = init.a;
    sa.dim = 3;
    sa.start = 0;
    sa.stop = cin;
    sa.step = 1;
    int gref = KN_REF(gn, 0);
    KN_TRY(append_like(x, KN_OP_SLICE, &gref, 1, &sa, i, &sl));
    KN_TRY(append_permute(x, KN_REF(sl, 0), to_nchw, i, &view));
    kn_graph *g = x->g;
    memcpy(g->nodes[gn].covers, g->nodes[i].covers, sizeof g->nodes[gn].covers);
    if (!kn_pass_replace(x, i, KN_REF(view, 0))) return KN_OK;
    char who[200];
    kn_pass_note(x, "channels_last: %s runs NHWC (its %lld input channels padded to %lld)",
                 kn_pass_who(g, i, who, sizeof who), (long long)cin, (long long)cp);
    return KN_OK;
}

/* conv2d's gradient node i (a training step's backward) runs channels-last
 * too: cuDNN's tensor-core engines read and write NHWC, and so do kiln's
 * split-precision f32 gradients (Hopper). Left NCHW, each read its NHWC
 * operands through a copy to NCHW (10-57 us each for the convnet sample,
 * bf16, H200) and ran the NCHW engines at 3-11% of the roofline. The
 * input's gradient is a view again, so the BatchNorm and ReLU gradients
 * after it stay NHWC; the weight's is read through its view (a few KB).
 * f32 graphs are channels-last under "auto" only where the device runs
 * f32 convolutions faster so (kn_plan_build.c). Where the channels
 * (groups 1 only) are not whole 16-byte vectors, as the 3 of an image,
 * the weight's gradient reads x padded with zero channels
 * (padded_weight_grad) and the input's stays NCHW: the NHWC kernels want
 * whole vectors, and a refused gradient has no fallback. */
static kn_status convert_conv_grad(cl_ctx *c, int i)
{
    kn_pass_ctx *x = c->x;
    kn_graph *g = x->g;
    char who[200];
    const kn_node *n = &g->nodes[i];
    bool input_grad = n->op == KN_OP_CONV2D_INPUT_GRAD;
    kn_dtype dt = n->out[0].dtype;
    if (n->a.in_layout != KN_LAYOUT_NCHW || n->a.out_layout != KN_LAYOUT_NCHW || n->n_in != 2) return KN_OK;
    const kn_meta *m0 = &g->nodes[n->in_node[0]].out[n->in_out[0]];
    const kn_meta *m1 = &g->nodes[n->in_node[1]].out[n->in_out[1]];
    if (!dtype_converts(x->flags, dt) || m0->dtype != dt || m1->dtype != dt) return KN_OK;
    if (m0->ndim != 4 || m1->ndim != 4 || n->out[0].ndim != 4 || n->a.nshape != 4) return KN_OK;
    /* channels of x and of the output gradient: x's are attr shape[1] (the
     * input's gradient) or in[0]'s; dy's in[0]'s or in[1]'s */
    int64_t cin = input_grad ? n->a.shape[1] : m0->shape[1], cout = input_grad ? m0->shape[1] : m1->shape[1];
    int64_t mult = 16 / (int64_t)kn_dtype_size(dt);
    if (!input_grad && n->a.groups == 1 && cin % mult != 0 && cout % mult == 0)
        return padded_weight_grad(c, i, cin, (cin + mult - 1) / mult * mult);
    if (n->a.groups != 1 || cin % mult != 0 || cout % mult != 0) {
        kn_pass_note(x, "channels_last: %s stays NCHW: %s", kn_pass_who(g, i, who, sizeof who),
                     n->a.groups != 1 ? "a grouped convolution's gradient"
                                      : "its channels are not whole 16-byte vectors for the NHWC kernels");
        return KN_OK;
    }
    int r0, r1;
    KN_TRY(nhwc_operand(c, KN_REF(n->in_node[0], n->in_out[0]), i, &r0));
    g = x->g;
    n = &g->nodes[i];
    KN_TRY(nhwc_operand(c, KN_REF(n->in_node[1], n->in_out[1]), i, &r1));
    g = x->g;
    n = &g->nodes[i];
    kn_attrs a = n->a;
    a.in_layout = a.out_layout = KN_LAYOUT_NHWC;
    for (int d = 0; d < 4; d++) a.shape[d] = n->a.shape[to_nhwc[d]];
    int refs[2] = {r0, r1}, gn, view;
    KN_TRY(append_like(x, n->op, refs, 2, &a, i, &gn));
    KN_TRY(append_permute(x, KN_REF(gn, 0), to_nchw, i, &view));
    g = x->g;
    memcpy(g->nodes[gn].covers, g->nodes[i].covers, sizeof g->nodes[gn].covers);
    if (!kn_pass_replace(x, i, KN_REF(view, 0))) return KN_OK;
    kn_pass_note(x, "channels_last: %s runs NHWC", kn_pass_who(x->g, i, who, sizeof who));
    return input_grad ? remember_view(c, view, KN_REF(gn, 0)) : KN_OK;
}

static bool elementwise(const kn_node *n)
{
    return n->n_out == 1 && kn_op_is_elementwise((kn_op)n->op);
}

/* Elementwise node i reads one of this pass's views: run it on the NHWC
 * values and show its result through a view too. Its other operands are
 * scalars, views of this pass, or values that broadcast against the NCHW
 * shape (a {C, 1, 1} bias, a residual): those are read permuted. */
static kn_status sink_elementwise(cl_ctx *c, int i)
{
    kn_pass_ctx *x = c->x;
    kn_graph *g = x->g;
    const kn_node *n = &g->nodes[i];
    if (!elementwise(n) || n->out[0].ndim != 4) return KN_OK;
    bool reads_view = false;
    for (int k = 0; k < n->n_in; k++) {
        int src = nhwc_behind(c, n->in_node[k]);
        if (src < 0) {
            if (g->nodes[n->in_node[k]].out[n->in_out[k]].ndim > 4) return KN_OK;
            continue;
        }
        /* a view of 4 dims, the full shape or one broadcast up to it
         * (each of its dims the output's or 1): NHWC order keeps that */
        const kn_meta *vm = &g->nodes[n->in_node[k]].out[0];
        if (vm->ndim != 4) return KN_OK;
        bool full = true;
        for (int d = 0; d < 4; d++) {
            if (vm->shape[d] != n->out[0].shape[d] && vm->shape[d] != 1) return KN_OK;
            full = full && vm->shape[d] == n->out[0].shape[d];
        }
        reads_view = reads_view || full;
    }
    if (!reads_view) return KN_OK;
    int refs[KN_MAX_INPUTS];
    int n_in = n->n_in;
    for (int k = 0; k < n_in; k++) {
        n = &g->nodes[i];
        int in = n->in_node[k], out = n->in_out[k], src = nhwc_behind(c, in);
        if (src >= 0) {
            refs[k] = src;
            continue;
        }
        const kn_meta *m = &g->nodes[in].out[out];
        int ref = KN_REF(in, out);
        if (m->ndim == 0) {
            refs[k] = ref;
            continue;
        }
        if (m->ndim < 4) { /* leading ones, as broadcasting reads it */
            kn_opcall init;
            kn_opcall_init(&init, KN_OP_RESHAPE);
            kn_attrs a = init.a;
            a.nshape = 4;
            int lead = 4 - m->ndim;
            for (int d = 0; d < 4; d++) a.shape[d] = d < lead ? 1 : m->shape[d - lead];
            int r;
            KN_TRY(append_like(x, KN_OP_RESHAPE, &ref, 1, &a, i, &r));
            ref = KN_REF(r, 0);
        }
        int p;
        KN_TRY(append_permute(x, ref, to_nhwc, i, &p));
        refs[k] = KN_REF(p, 0);
    }
    g = x->g;
    kn_attrs a = g->nodes[i].a;
    int nn, view;
    KN_TRY(append_like(x, g->nodes[i].op, refs, n_in, &a, i, &nn));
    KN_TRY(append_permute(x, KN_REF(nn, 0), to_nchw, i, &view));
    if (!kn_pass_replace(x, i, KN_REF(view, 0))) return KN_OK;
    return remember_view(c, view, KN_REF(nn, 0));
}

/* BatchNorm node i (a training step's, whose statistics are the batch's,
 * so the inference fold left it) normalizes one of this pass's views: it
 * runs on the NHWC value with its channels last (in_layout NHWC), and its
 * result is a view again. Read through the view, its per-channel loads and
 * its output walked NCHW order over NHWC bytes: 89 us for a 32 x 32 x
 * 112 x 112 f32 batch on the H200, 28% of the memory roof, and the conv
 * after it got an NCHW input to transpose. */
static kn_status sink_batch_norm(cl_ctx *c, int i)
{
    kn_pass_ctx *x = c->x;
    kn_graph *g = x->g;
    const kn_node *n = &g->nodes[i];
    if (n->a.in_layout != KN_LAYOUT_NCHW || n->out[0].ndim != 4) return KN_OK;
    int src = nhwc_behind(c, n->in_node[0]);
    if (src < 0) return KN_OK;
    int refs[KN_MAX_INPUTS];
    refs[0] = src;
    for (int k = 1; k < n->n_in; k++) refs[k] = KN_REF(n->in_node[k], n->in_out[k]);
    kn_attrs a = n->a;
    a.in_layout = a.out_layout = KN_LAYOUT_NHWC;
    int bn, view;
    KN_TRY(append_like(x, KN_OP_BATCH_NORM, refs, n->n_in, &a, i, &bn));
    KN_TRY(append_permute(x, KN_REF(bn, 0), to_nchw, i, &view));
    if (!kn_pass_replace(x, i, KN_REF(view, 0))) return KN_OK;
    char who[200];
    kn_pass_note(x, "channels_last: %s runs NHWC on the conv chain's value", kn_pass_who(x->g, i, who, sizeof who));
    return remember_view(c, view, KN_REF(bn, 0));
}

/* Whether node n is a mean over dims 2 and 3 (H and W) of a 4-dim value. */
static bool mean_over_hw(const kn_node *n)
{
    if (n->op != KN_OP_MEAN || n->n_in != 1 || n->a.ndims != 2) return false;
    int d0 = n->a.dims[0] < 0 ? n->a.dims[0] + 4 : n->a.dims[0], d1 = n->a.dims[1] < 0 ? n->a.dims[1] + 4 : n->a.dims[1];
    int lo = d0 < d1 ? d0 : d1, hi = d0 < d1 ? d1 : d0;
    return lo == 2 && hi == 3;
}

/* Pool node i (or a mean over H and W, as a global average pool) reads one
 * of this pass's views: it runs on the NHWC value with NHWC output, and its
 * result is a view again (a mean without keepdim: a reshape of the
 * {N, 1, 1, C} pool to {N, C}, the same bytes). */
static kn_status sink_pool(cl_ctx *c, int i)
{
    kn_pass_ctx *x = c->x;
    kn_graph *g = x->g;
    const kn_node *n = &g->nodes[i];
    bool is_mean = mean_over_hw(n);
    if (!is_mean && kn_op_kind_of((kn_op)n->op) != KN_K_POOL) return KN_OK;
    if (n->n_in != 1 || n->a.in_layout != KN_LAYOUT_NCHW) return KN_OK;
    int src = nhwc_behind(c, n->in_node[0]);
    if (src < 0 || g->nodes[n->in_node[0]].out[0].ndim != 4) return KN_OK;
    int op = is_mean ? KN_OP_ADAPTIVE_AVG_POOL2D : n->op;
    kn_attrs a;
    if (is_mean) {
        kn_opcall init;
        kn_opcall_init(&init, KN_OP_ADAPTIVE_AVG_POOL2D);
        a = init.a;
        a.nshape = 2;
        a.shape[0] = a.shape[1] = 1;
    } else {
        a = n->a;
    }
    a.in_layout = a.out_layout = KN_LAYOUT_NHWC;
    bool keep = !is_mean || n->a.keepdim;
    int pool, view;
    KN_TRY(append_like(x, op, &src, 1, &a, i, &pool));
    if (keep) {
        KN_TRY(append_permute(x, KN_REF(pool, 0), to_nchw, i, &view));
    } else {
        kn_opcall init;
        kn_opcall_init(&init, KN_OP_RESHAPE);
        kn_attrs r = init.a;
        g = x->g;
        r.nshape = 2;
        r.shape[0] = g->nodes[i].out[0].shape[0];
        r.shape[1] = g->nodes[i].out[0].shape[1];
        int ref = KN_REF(pool, 0);
        KN_TRY(append_like(x, KN_OP_RESHAPE, &ref, 1, &r, i, &view));
    }
    if (!kn_pass_replace(x, i, KN_REF(view, 0))) return KN_OK;
    char who[200];
    kn_pass_note(x, "channels_last: %s runs NHWC on the conv chain's value%s", kn_pass_who(x->g, i, who, sizeof who),
                 is_mean ? ", as a global average pool" : "");
    return keep ? remember_view(c, view, KN_REF(pool, 0)) : KN_OK;
}

kn_status kn_pass_channels_last(kn_pass_ctx *x)
{
    if (!(x->flags & (KN_PASSES_NHWC_HALF | KN_PASSES_NHWC_F32))) return KN_OK;
    cl_ctx c = {x, NULL, NULL, 0, 0};
    kn_status st = KN_OK;
    for (int i = 0; i < x->n_orig && st == KN_OK; i++) {
        if (x->dead[i]) continue;
        kn_pass_resolve_inputs(x, i);
        int op = x->g->nodes[i].op;
        if (op == KN_OP_CONV2D) st = convert_conv(&c, i);
        else if (op == KN_OP_MEAN || kn_op_kind_of((kn_op)op) == KN_K_POOL) st = sink_pool(&c, i);
        else if (op == KN_OP_BATCH_NORM) st = sink_batch_norm(&c, i);
        else if (op == KN_OP_CONV2D_INPUT_GRAD || op == KN_OP_CONV2D_WEIGHT_GRAD) st = convert_conv_grad(&c, i);
        else st = sink_elementwise(&c, i);
    }
    free(c.view_node);
    free(c.nhwc_ref);
    return st;
}
