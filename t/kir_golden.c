/* t/kir_golden.c: the generated source of both render targets, byte for
 * byte. The persistent caches are keyed by source text, so a change to the
 * renderer or a target descriptor that alters a single character costs
 * every user a recompile (and may change results); this test makes such a
 * change visible. Six hand-built kernels (pointwise over bf16 with a
 * broadcast row and two outputs, a transposed f32 read, softmax rows, an
 * f16 normalization with a per-row output, an f32 norm, a bf16 layer
 * norm) are rendered as one program per
 * target and configuration into t/golden/kir_sources.txt. The file was
 * written by the renderer before the targets became descriptors; rewrite
 * it with KILN_UPDATE_GOLDEN=1 only for a change meant to alter the text.
 *
 * Also: the renderer reads a target's fields rather than knowing targets
 * (a copy of the C target with other fields renders differently), and
 * every backend's target is complete.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_backend.h"
#include "kn_kernels.h"
#include "kn_kir.h"
#include "tap.h"

#define GOLDEN "t/golden/kir_sources.txt"
#define N_KERNELS 6

static int add(kn_kernel *k, kn_kexpr e)
{
    int i = -1;
    if (kn_kernel_add_expr(k, &e, &i) != KN_OK) printf("Bail out! %s\n", kn_last_error());
    return i;
}

static int ld(kn_kernel *k, int buf)
{
    return add(k, (kn_kexpr){.kind = KN_KX_LOAD, .buf = buf, .a = -1, .b = -1, .c = -1, .dtype = k->args[buf].dtype});
}

static int cst(kn_kernel *k, double v, kn_dtype dt)
{
    return add(k, (kn_kexpr){.kind = KN_KX_CONST, .value = v, .a = -1, .b = -1, .c = -1, .dtype = dt});
}

static int op(kn_kernel *k, kn_op o, int a, int b, int c, kn_dtype dt)
{
    return add(k, (kn_kexpr){.kind = KN_KX_OP, .op = o, .a = a, .b = b, .c = c, .dtype = dt});
}

static int acc(kn_kernel *k, int s, kn_dtype dt)
{
    return add(k, (kn_kexpr){.kind = KN_KX_ACC, .acc = s, .a = -1, .b = -1, .c = -1, .dtype = dt});
}

/* An argument with the given strides over the kernel's space. */
static int arg(kn_kernel *k, kn_dtype dt, bool out, int64_t s0, int64_t s1)
{
    kn_karg a = {.dtype = dt, .is_output = out, .strides = {s0, s1}};
    int i = -1;
    if (kn_kernel_add_arg(k, &a, &i) != KN_OK) printf("Bail out! %s\n", kn_last_error());
    return i;
}

static void store(kn_kernel *k, int a, int e, bool per_row)
{
    k->stores[k->n_stores++] = (kn_kstore){.arg = a, .expr = e, .per_row = per_row};
}

static void init(kn_kernel *k, const char *name, kn_kernel_kind kind, int64_t n0, int64_t n1)
{
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->kind = kind;
    k->ndim = 2;
    k->shape[0] = n0;
    k->shape[1] = n1;
}

static void build(kn_kernel ks[N_KERNELS])
{
    kn_kernel *k = &ks[0]; /* out = tanh(x + b) * 0.5 (bf16), pos = x > 0 ? that : 0 (f16) */
    init(k, "k0_bias_tanh", KN_KERNEL_POINTWISE, 64, 96);
    int x = arg(k, KN_BF16, false, 96, 1), b = arg(k, KN_BF16, false, 0, 1);
    int o = arg(k, KN_BF16, true, 96, 1), pos = arg(k, KN_F16, true, 96, 1);
    int lx = ld(k, x);
    int y = op(k, KN_OP_MUL, op(k, KN_OP_TANH, op(k, KN_OP_ADD, lx, ld(k, b), -1, KN_BF16), -1, -1, KN_BF16),
               cst(k, 0.5, KN_BF16), -1, KN_BF16);
    store(k, o, y, false);
    int gt = op(k, KN_OP_GT, lx, cst(k, 0, KN_BF16), -1, KN_BOOL);
    store(k, pos, op(k, KN_OP_CAST, op(k, KN_OP_WHERE, gt, y, cst(k, 0, KN_BF16), KN_BF16), -1, -1, KN_F16), false);

    k = &ks[1]; /* exp(x^T) - y, f32, read transposed */
    init(k, "k1_transposed", KN_KERNEL_POINTWISE, 37, 129);
    x = arg(k, KN_F32, false, 1, 37);
    int yy = arg(k, KN_F32, false, 129, 1);
    o = arg(k, KN_F32, true, 129, 1);
    store(k, o, op(k, KN_OP_SUB, op(k, KN_OP_EXP, ld(k, x), -1, -1, KN_F32), ld(k, yy), -1, KN_F32), false);

    k = &ks[2]; /* softmax over rows of 300 */
    init(k, "k2_softmax", KN_KERNEL_ROW, 13, 300);
    x = arg(k, KN_F32, false, 300, 1);
    o = arg(k, KN_F32, true, 300, 1);
    lx = ld(k, x);
    k->stages[k->n_stages++] = (kn_kstage){.op = KN_OP_AMAX, .expr = lx};
    int sh = op(k, KN_OP_SUB, lx, acc(k, 0, KN_F32), -1, KN_F32);
    k->stages[k->n_stages++] = (kn_kstage){.op = KN_OP_SUM, .expr = op(k, KN_OP_EXP, sh, -1, -1, KN_F32)};
    store(k, o, op(k, KN_OP_DIV, op(k, KN_OP_EXP, sh, -1, -1, KN_F32), acc(k, 1, KN_F32), -1, KN_F32), false);

    k = &ks[3]; /* (x - mean) * w, and the mean per row, f16 */
    init(k, "k3_center", KN_KERNEL_ROW, 9, 200);
    x = arg(k, KN_F16, false, 200, 1);
    int w = arg(k, KN_F16, false, 0, 1);
    o = arg(k, KN_F16, true, 200, 1);
    int mean_out = arg(k, KN_F16, true, 1, 0);
    lx = ld(k, x);
    k->stages[k->n_stages++] = (kn_kstage){.op = KN_OP_SUM, .expr = lx};
    int mean = op(k, KN_OP_MUL, acc(k, 0, KN_F16), cst(k, 1.0 / 200, KN_F16), -1, KN_F16);
    store(k, o, op(k, KN_OP_MUL, op(k, KN_OP_SUB, lx, mean, -1, KN_F16), ld(k, w), -1, KN_F16), false);
    store(k, mean_out, mean, true);

    k = &ks[4]; /* (x - mean) * w + b over rows of 512, f32: a layer norm's shape */
    init(k, "k4_norm", KN_KERNEL_ROW, 6, 512);
    x = arg(k, KN_F32, false, 512, 1);
    w = arg(k, KN_F32, false, 0, 1);
    int bias = arg(k, KN_F32, false, 0, 1);
    o = arg(k, KN_F32, true, 512, 1);
    lx = ld(k, x);
    k->stages[k->n_stages++] = (kn_kstage){.op = KN_OP_SUM, .expr = lx};
    mean = op(k, KN_OP_MUL, acc(k, 0, KN_F32), cst(k, 1.0 / 512, KN_F32), -1, KN_F32);
    int scaled = op(k, KN_OP_MUL, op(k, KN_OP_SUB, lx, mean, -1, KN_F32), ld(k, w), -1, KN_F32);
    store(k, o, op(k, KN_OP_ADD, scaled, ld(k, bias), -1, KN_F32), false);

    k = &ks[5]; /* a bf16 layer norm: the mean, then the sum of squares around it */
    init(k, "k5_layer_norm", KN_KERNEL_ROW, 6, 512);
    x = arg(k, KN_BF16, false, 512, 1);
    w = arg(k, KN_BF16, false, 0, 1);
    bias = arg(k, KN_BF16, false, 0, 1);
    o = arg(k, KN_BF16, true, 512, 1);
    lx = ld(k, x);
    k->stages[k->n_stages++] = (kn_kstage){.op = KN_OP_SUM, .expr = lx};
    mean = op(k, KN_OP_MUL, acc(k, 0, KN_F32), cst(k, 1.0 / 512, KN_F32), -1, KN_F32);
    int dev = op(k, KN_OP_SUB, lx, mean, -1, KN_F32);
    k->stages[k->n_stages++] = (kn_kstage){.op = KN_OP_SUM, .expr = op(k, KN_OP_MUL, dev, dev, -1, KN_F32)};
    int var = op(k, KN_OP_MUL, acc(k, 1, KN_F32), cst(k, 1.0 / 512, KN_F32), -1, KN_F32);
    int rstd = op(k, KN_OP_RSQRT, op(k, KN_OP_ADD, var, cst(k, 1e-5, KN_F32), -1, KN_F32), -1, -1, KN_F32);
    scaled = op(k, KN_OP_MUL, op(k, KN_OP_MUL, dev, rstd, -1, KN_F32), ld(k, w), -1, KN_F32);
    store(k, o, op(k, KN_OP_ADD, scaled, ld(k, bias), -1, KN_BF16), false);
}

/* Every knob each target reads, in a few settings (the other target's
 * knobs are ignored, which the text shows too). */
static const char *const c_configs[] = {"default", "unroll=4", "tile=16 unroll=2 vec=8", "block=128 ept=4"};
static const char *const cuda_configs[] = {"default",          "block=128 ept=4",   "block=256 vec=4",
                                           "block=512 rows=block", "block=128 rows=warp", "block=64 rows=regs", "vec=1",
                                           "block=128 rows=bregs",
                                           "unroll=4 tile=16"};

/* The sections of one target: its prelude, then the program (less the
 * prelude) per configuration. */
static bool render_target(FILE *f, const kn_render_target *t, const char *const *cfgs, int n_cfgs,
                          kn_kernel ks[N_KERNELS])
{
    char *prelude = NULL;
    if (kn_kir_prelude(t, &prelude) != KN_OK) return false;
    fprintf(f, "==== %s prelude\n%s", t->name, prelude);
    bool good = true;
    for (int i = 0; i < n_cfgs && good; i++) {
        kn_kconfig cfg;
        good = kn_kconfig_parse(cfgs[i], &cfg) == KN_OK;
        for (int j = 0; j < N_KERNELS; j++) ks[j].cfg = cfg;
        kn_kprogram p = {N_KERNELS, ks};
        char *src = NULL;
        good = good && kn_kprogram_render(&p, t, &src) == KN_OK && strncmp(src, prelude, strlen(prelude)) == 0;
        if (good) fprintf(f, "==== %s %s\n%s", t->name, cfgs[i], src + strlen(prelude));
        free(src);
    }
    free(prelude);
    return good;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, m);
    fclose(f);
    fclose(m);
    return text;
}

/* The section of text starting at "==== NAME\n", up to the next one. */
static char *section(const char *text, const char *name)
{
    char head[128];
    snprintf(head, sizeof head, "==== %s\n", name);
    const char *p = text;
    while (p && strncmp(p, head, strlen(head)) != 0) {
        p = strstr(p, "\n==== ");
        if (p) p++;
    }
    if (!p) return NULL;
    const char *end = strstr(p + strlen(head), "\n==== ");
    size_t n = end ? (size_t)(end - p) + 1 : strlen(p);
    char *s = malloc(n + 1);
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* One TAP line per section; a mismatch shows its first differing line. */
static void compare(const char *got, const char *want, const char *name)
{
    char *g = section(got, name), *w = section(want, name);
    bool same = g && w && strcmp(g, w) == 0;
    ok(same, "%s: the rendered source is the golden one", name);
    if (!same && g && w) {
        const char *a = g, *b = w;
        int line = 1;
        while (*a && *a == *b) {
            if (*a == '\n') line++;
            a++;
            b++;
        }
        printf("#   first difference at line %d of the section:\n#   got:  %.*s\n#   want: %.*s\n", line,
               (int)strcspn(a, "\n"), a, (int)strcspn(b, "\n"), b);
    }
    free(g);
    free(w);
}

/* A copy of the C target with other fields: the renderer must follow them. */
static void test_fields_are_read(kn_kernel ks[N_KERNELS])
{
    kn_render_target t = kn_cpu_render_target;
    t.name = "c-variant";
    t.unroll_pragma = "#pragma unroll";
    t.f32_math_in_f64 = false;
    t.f32_row_sum_in_f64 = false;
    t.after_params = NULL;
    kn_kernel k = ks[2]; /* softmax: f32 math and a float row sum */
    k.cfg = (kn_kconfig){.unroll = 4};
    char *src = NULL, *ref = NULL;
    ok(kn_kernel_render(&k, &t, &src) == KN_OK && kn_kernel_render(&k, KN_TARGET_C, &ref) == KN_OK,
       "a copy of the C target with other fields renders");
    if (!src || !ref) return;
    ok(strstr(src, "#pragma unroll 4\n") && !strstr(src, "GCC unroll") && strstr(ref, "#pragma GCC unroll 4\n"),
       "the unroll pragma is the target's spelling");
    const char *body = strstr(src, "void k2_softmax"), *ref_body = strstr(ref, "void k2_softmax"); /* past the prelude */
    ok(body && ref_body && !strstr(body, "(double)") && !strstr(body, "double s1") && strstr(ref_body, "(double)") &&
           strstr(ref_body, "double s1"),
       "f32 math and row sums stay in float where the target says so, in double for the C target");
    ok(!strstr(src, "(void)bufs") && strstr(ref, "(void)bufs; (void)sizes;"), "the line after the parameters is the target's");
    free(src);
    free(ref);
}

/* The CUDA rows held in registers, read structurally (the golden file pins
 * the bytes; these say what must hold whatever the bytes): the register
 * path is taken only where the row moves in whole aligned vectors (its
 * guard tests the alignment), it has no element-by-element copy of the row
 * (a misaligned row reads memory in the loop after it: that copy had cost
 * ~50 registers), an input only the stores read is loaded with the row
 * where the row's arguments take at most 8 bytes an element (the f16
 * weight of ks[3]) and after the reductions where they take more (the f32
 * weight and bias of ks[4]), its vector
 * stores are one 16-byte store each, and a row kept in <= 64 bytes a
 * thread asks ptxas for 64 registers (1024 threads an SM). */
static void test_cuda_rows_in_registers(kn_kernel ks[N_KERNELS])
{
    for (int j = 2; j < 5; j++) {
        kn_kconfig_parse("default", &ks[j].cfg);
        char *src = NULL;
        if (!ok(kn_kernel_render(&ks[j], KN_TARGET_CUDA, &src) == KN_OK, "%s renders", ks[j].name)) continue;
        const char *guard = strstr(src, "if (n1 <= ");
        const char *eol = guard ? strchr(guard, '\n') : NULL;
        bool aligned = false;
        for (const char *p = guard; p && eol && (p = strstr(p, "% 16) == 0")) && p < eol; p++) aligned = true;
        ok(guard && aligned, "%s: the register path's guard tests vector alignment", ks[j].name);
        bool scalar_copy = false; /* c0[u / 4].x[u % 4] = p0[...] or p1[...] = d1[u / 4].x[u % 4] */
        for (const char *line = src; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            const char *end = strchr(line, '\n'), *reg = strstr(line, ".x[u % ");
            if (!reg || (end && reg > end)) continue;
            const char *text = line + strspn(line, " ");
            const char *from_mem = strstr(line, "= p");
            if ((from_mem && (!end || from_mem < end)) || text[0] == 'p') scalar_copy = true;
        }
        ok(!scalar_copy, "%s: no element-by-element copy between memory and the row's registers", ks[j].name);
        ok(strstr(src, "const bool kv") == NULL, "%s: no run-time choice inside the register path", ks[j].name);
        ok(strstr(src, "__launch_bounds__(256, 4)") != NULL, "%s: rows of 12 f32 / 8 f16 a lane ask for 64 registers",
           ks[j].name);
        const char *reduced = strstr(src, "const float acc0 =");
        const char *weight = strstr(src, "c1[g] = *(const v1_t *)");
        if (j == 3) /* f16 x and w: 4 bytes an element, which registers hold through the reduction */
            ok(reduced && weight && weight < reduced,
               "%s: the weight, read only by the stores, loads with x, before the reduction", ks[j].name);
        if (j == 4) /* f32 x, w and b: 12 bytes an element, too many to hold through the reduction */
            ok(reduced && weight && weight > reduced,
               "%s: the weight, read only by the stores, loads after the reduction", ks[j].name);
        if (j == 4) {
            const char *store = reduced ? strstr(reduced, "kn_st16(&p3[") : NULL;
            ok(store && !strstr(src, "*(v3_t *)&p3["), "%s: the row's results leave in 16-byte stores", ks[j].name);
        }
        free(src);
    }
}

/* The bf16 pointwise kernel's bf16 add (ks[0]) is a pair op on CUDA (two
 * elements in one add.rn.bf16x2), and f32 rounded to bf16 on C. */
static void test_pair_ops(kn_kernel ks[N_KERNELS])
{
    for (int t = 0; t < 2; t++) {
        kn_kconfig_parse("default", &ks[0].cfg);
        char *src = NULL;
        const kn_render_target *id = t ? KN_TARGET_C : KN_TARGET_CUDA;
        if (!ok(kn_kernel_render(&ks[0], id, &src) == KN_OK, "%s renders", ks[0].name)) continue;
        bool pair = strstr(src, "kn_pair_add_bf16(l") != NULL;
        ok(pair == !t, "%s %s: the bf16 add %s", ks[0].name, t ? "c" : "cuda", t ? "in f32, rounded" : "as a pair op");
        free(src);
    }
}

/* The default vectors a thread of a pointwise kernel (n elements, one op
 * `o`, dtype dt): the fewest whose blocks fit the GPU at once (1056 of
 * 256 threads), else 4; at most 2 with a transcendental. */
static int default_ept(int64_t n, kn_op o, kn_dtype dt)
{
    static kn_kernel k;
    init(&k, "k0_ept", KN_KERNEL_POINTWISE, 1, n);
    int x = arg(&k, dt, false, n, 1), out = arg(&k, dt, true, n, 1);
    store(&k, out, op(&k, o, ld(&k, x), -1, -1, dt), false);
    kn_kconfig_parse("default", &k.cfg);
    return kn_kernel_vec_ept(&k);
}

static void test_default_ept(void)
{
    ok(default_ept(200704, KN_OP_RELU, KN_F32) == 1, "an f32 ReLU of 0.2M elements: one vector a thread (196 blocks)");
    ok(default_ept(1605632, KN_OP_RELU, KN_F32) == 2,
       "of 1.6M: two (784 blocks, where one left 1568: a second, ragged wave)");
    ok(default_ept(3211264, KN_OP_RELU, KN_F32) == 4, "of 3.2M: four (784 blocks)");
    ok(default_ept(102760448 / 4, KN_OP_RELU, KN_F32) == 4, "of 26M: four, the grid-stride loop takes the rest");
    ok(default_ept(8388608, KN_OP_GELU, KN_BF16) == 2, "a bf16 GELU of 8.4M: two, a transcendental's most");
}

/* Each backend's target is complete and is what its vtable hands to core. */
static void test_backend_targets(void)
{
    const kn_render_target *ts[] = {KN_TARGET_C, KN_TARGET_CUDA};
    for (int i = 0; i < 2; i++) {
        const kn_render_target *t = ts[i];
        ok(t->name && t->prelude && t->bufs && t->sizes && t->signature && t->pointwise && t->row && t->candidates,
           "target %s has a name, a prelude, parameters, a signature, loop nests and candidates", t->name);
    }
    kn_device_ctx *cpu = kn_backend_get(KN_CPU), *cuda = kn_backend_get(KN_CUDA);
    ok(cpu && cpu->be->render_target == KN_TARGET_C, "the CPU backend renders with the C target");
    if (cuda) ok(cuda->be->render_target == KN_TARGET_CUDA, "the CUDA backend renders with the CUDA target");
}

int main(void)
{
    static kn_kernel ks[N_KERNELS];
    build(ks);
    char *got = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&got, &len);
    bool good = render_target(f, KN_TARGET_C, c_configs, (int)(sizeof c_configs / sizeof *c_configs), ks) &&
                render_target(f, KN_TARGET_CUDA, cuda_configs, (int)(sizeof cuda_configs / sizeof *cuda_configs), ks);
    fclose(f);
    if (!ok(good, "every kernel renders on both targets in every configuration")) printf("#   %s\n", kn_last_error());
    if (getenv("KILN_UPDATE_GOLDEN")) {
        FILE *out = fopen(GOLDEN, "w");
        ok(out && fputs(got, out) >= 0 && fclose(out) == 0, "wrote " GOLDEN);
    }
    char *want = read_all(GOLDEN);
    if (!ok(want != NULL, "%s is readable (run from the repository root)", GOLDEN)) return done_testing();
    ok(strcmp(got, want) == 0, "the whole file matches (%zu bytes rendered)", strlen(got));
    const char *const *lists[] = {c_configs, cuda_configs};
    int counts[] = {(int)(sizeof c_configs / sizeof *c_configs), (int)(sizeof cuda_configs / sizeof *cuda_configs)};
    const char *names[] = {"c", "cuda"};
    for (int t = 0; t < 2; t++) {
        char name[96];
        snprintf(name, sizeof name, "%s prelude", names[t]);
        compare(got, want, name);
        for (int i = 0; i < counts[t]; i++) {
            snprintf(name, sizeof name, "%s %s", names[t], lists[t][i]);
            compare(got, want, name);
        }
    }
    free(got);
    free(want);
    test_fields_are_read(ks);
    test_backend_targets();
    test_cuda_rows_in_registers(ks);
    test_pair_ops(ks);
    test_default_ept();
    return done_testing();
}
