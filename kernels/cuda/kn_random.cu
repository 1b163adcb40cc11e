/* kn_random.cu: randn, rand and randint (kernels/cpu/kn_cpu_create.c is
 * the reference). Element i comes from core/base/kn_rng.h (prepended to the
 * module) at counter rng_offset + i, the same code the CPU runs, and the
 * transforms below are the CPU's: same seed, same bits.
 */

#if !defined(KN_ONE_KERNEL) || defined(KN_KSEL_kn_random)
extern "C" __global__ void kn_random(kn_random_args a)
{
    const int es = kn_esize<KN_DT>();
    for (long long i = kn_tid(); i < a.n; i += kn_nthreads()) {
        unsigned long long k = a.offset + (unsigned long long)i;
        double v;
        if (a.op == KN_TRNG_NORMAL) {
            v = kn_rng_normal(a.seed, k);
        } else {
            double u = kn_rng_uniform(a.seed, k);
            if (a.op == KN_TRNG_UNIFORM) {
                v = a.hi > a.lo ? a.lo + u * (a.hi - a.lo) : u;
            } else {
                v = floor(a.lo + u * (a.hi - a.lo));
                if (v >= a.hi) v = ceil(a.hi) - 1; /* rounding of a huge range must not reach high */
            }
        }
        kn_std<KN_DT>(a.out + i * es, v);
    }
}
#endif
