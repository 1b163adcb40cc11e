/* kn_interrupt: the Ctrl-C flag shared by the REPL's signal handler and the
 * C code that polls it (see kn_interrupt.h). */
#include "kn_interrupt.h"

#include <stdatomic.h>

/* A lock-free atomic is both async-signal-safe (C11 7.14.1.1) and visible to
 * worker threads, which a volatile sig_atomic_t does not promise. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "kn_interrupt needs a lock-free atomic int");

static atomic_int kn_interrupt_flag;

void kn_interrupt_request(void)
{
    atomic_store_explicit(&kn_interrupt_flag, 1, memory_order_relaxed);
}

int kn_interrupt_pending(void)
{
    return atomic_load_explicit(&kn_interrupt_flag, memory_order_relaxed);
}

void kn_interrupt_clear(void)
{
    atomic_store_explicit(&kn_interrupt_flag, 0, memory_order_relaxed);
}
