/* kn_profile: per-kernel device timing (kiln.time, kiln.profile, :time,
 * kiln.trace). The roofline's ceilings are measured by kn_ceilings.
 *
 * One process-wide session at a time: between kn_profile_begin(dev) and
 * kn_profile_end, every kernel a plan runs on dev (generated, library or
 * reference) and every eager op on dev gets a backend event before and
 * after it, with its name, kind, and the bytes and flops of kn_cost. An op
 * run inside a plan's kernel (a copy its library call needs) is recorded
 * as part of that kernel (inner, parent); deeper ones, and those inside an
 * eager op, are not recorded apart. Events come
 * from a pool kept across sessions, so a profiled call creates none once
 * warm. Outside a session the hooks cost one test of kn_profile_on.
 *
 * Where the backend traces (kn_backend.h's trace slots: CUPTI), a record's
 * ms is the device time of the work it queued, exactly; otherwise the time
 * between its events.
 *
 * Work that is replayed from a device recording (CUDA graphs) runs no
 * hooks: whoever replays should run the plan directly while kn_profile_on.
 */
#ifndef KN_PROFILE_H
#define KN_PROFILE_H

#include <stdbool.h>

#include "kn_op.h"

typedef struct kn_profile_record {
    char name[96];     /* the kernel's name, or op_dtype_sizes for an eager op */
    char kind[16];     /* generated | cublaslt | cudnn | cuda | cpu */
    const void *owner; /* the plan that ran it (NULL: an eager op) */
    int index;         /* kernel index in owner's program, -1 for an eager op */
    int parent;        /* an eager op run for kernel `parent` of owner (a copy a
                          reshape makes for it to read, or one its library
                          call makes inside it), else -1 */
    bool inner;        /* ran inside kernel `parent`'s own call: its time is
                          part of that kernel's */
    int inside;        /* while recording: the slot it ran inside, or -1 */
    kn_dtype dtype;    /* of its (first) result: which peak rate applies */
    double start_ms;   /* from the session's first record */
    double ms;         /* device time between its events */
    double bytes, flops;
    double write_bytes; /* of bytes: the results' (kn_cost) */
} kn_profile_record;

/* Set while a session is on: what the hooks test. */
extern bool kn_profile_on;

/* Start a session on dev; KN_ERR_UNSUPPORTED when its backend has no
 * events, KN_ERR_ARG when a session is already on. */
kn_status kn_profile_begin(kn_device dev);
/* End the session: wait for the device, read every pair of events and hand
 * back the records in the order they ran (*records is the caller's to
 * free; NULL when there are none). */
kn_status kn_profile_end(kn_profile_record **records, int *n);
/* Drop a session without reading it (after an error). */
void kn_profile_cancel(void);

/* Hooks (call only while kn_profile_on, and call the matching end even
 * when the kernel failed): begin records the event before a kernel on dev
 * and returns its slot, or -1 when it is not recorded (another device, or
 * nested in a recorded kernel). settings: the kernel's (the backend's
 * hold_queue runs with them; NULL: the defaults). */
int kn_profile_kernel_begin(kn_device dev, const struct kn_settings *settings);
/* A kernel the caller describes (a plan's): name, kind, owner, index,
 * dtype, bytes and flops come from *what, its timing fields are ignored. */
void kn_profile_kernel_end(int slot, const kn_profile_record *what);
void kn_profile_op_end(int slot, const kn_opcall *c);
/* Eager ops recorded from now on are work done for kernel `kernel` of
 * plan `owner` (their records get owner and parent), until called again
 * with NULL, -1: a plan brackets the copies its views make this way, so
 * that tables show them under the kernel that reads them instead of as
 * kernels of their own. */
void kn_profile_within(const void *owner, int kernel);
/* The next op to begin is the recorded kernel's own op call (a plan's
 * reference kernel runs its node through kn_op_eager): it gets no record
 * and no nesting level, so what it runs inside counts as the kernel's.
 * Call again with false after that op, in case it never began. */
void kn_profile_next_is_kernel(bool on);

/* What profiling on dev times kernels with: "trace" (the backend's exact
 * device times: CUPTI on CUDA) or "events" (events around each kernel,
 * which also count the device's start of the kernel, about 3 us on a GPU;
 * and the CPU's clock readings). Runs an empty session the first time. */
const char *kn_profile_timing(kn_device dev);

/* The kind word of a kernel that is not generated, as cm:kernels() and the
 * timing tables show it. */
const char *kn_profile_op_kind(kn_device dev, kn_op op);

#endif
