/* A step's phases timed by the device itself (a GPU's events), for the step line: the host's
 * split shows where the host waited, which on a GPU is wherever it first needs a result (the
 * optimizer's non-finite count), not where the device worked. Marks go on the backend's timer
 * between the host's phases: the step's start, each micro-batch's end of forward (with the
 * loss) and of backward, the end of the wait for the collectives, the update's end. */
#include "src/engine/parts.h"

void dp_device_clock_mark(dp_engine *e)
{
    dp_device_clock *k = &e->device_clock;
    if (!e->be->timer_mark || k->count == DP_DEVICE_CLOCK_MARKS)
        return;
    k->mark[k->count++] = e->be->timer_mark(e->be);
}

/* Seconds between marks i and j; -1 when either found the timer full. */
static double between(const dp_engine *e, int i, int j)
{
    const dp_device_clock *k = &e->device_clock;
    if (k->mark[i] < 0 || k->mark[j] < 0)
        return -1.0;
    return e->be->timer_seconds(e->be, k->mark[i], k->mark[j]);
}

/* Adds the step's device times to split: forward i from the previous mark (the step's start,
 * or backward i - 1's end) to its own; then backward; then the wait and the update. A step
 * with marks missing (the timer full, more micro-batches than marks) adds nothing. */
void dp_device_clock_finish(dp_engine *e, dp_time_split *split)
{
    dp_device_clock *k = &e->device_clock;
    int n = k->count, complete = n >= 5 && n < DP_DEVICE_CLOCK_MARKS && n % 2 == 1;
    if (complete) {
        e->be->synchronize(e->be); /* events are read once the device has passed them */
        double forward = 0.0, backward = 0.0, wait = between(e, n - 3, n - 2), update = between(e, n - 2, n - 1);
        for (int i = 0; i + 2 < n - 2 && complete; i += 2) {
            double f = between(e, i, i + 1), b = between(e, i + 1, i + 2);
            complete = f >= 0.0 && b >= 0.0;
            forward += f;
            backward += b;
        }
        if (complete && wait >= 0.0 && update >= 0.0) {
            split->device_forward += forward;
            split->device_backward += backward;
            split->device_wait += wait;
            split->device_optimizer += update;
            split->device_steps += 1.0;
        }
    }
    /* Marks that started an empty timer are this clock's alone to clear (--trace's timeline,
     * when on, marks first and clears it at each step). */
    if (n && k->mark[0] == 0)
        e->be->timer_reset(e->be);
    k->count = 0;
}
