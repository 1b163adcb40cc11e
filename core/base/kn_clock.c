/* kn_clock: see kn_clock.h. */
#include "kn_clock.h"

#include <time.h>

double kn_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
