/* A job with a stalled rank, for tests/watchdog-requests.sh: run with `STALLED TIMEOUT`.
 * Every rank starts all-reduces of four buckets of a buffer as a reducer would during
 * backward, except rank STALLED, which completes buckets 0-2 and then stalls (as a rank stuck
 * in computation) without starting bucket 3. The others never wait: they keep computing and
 * progressing their requests, so only the watchdog's watch over outstanding requests (not a
 * bracketed blocking call) can end the job. It must, naming step 7, "the all-reduce of
 * bucket 3" and the stalled rank. */
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { BUCKETS = 4, BUCKET_FLOATS = 1000 };

static void check(int status, int rank)
{
    if (status) {
        fprintf(stderr, "watchdog_probe: rank %d: %s\n", rank, dp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void pause_briefly(void)
{
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
}

int main(int argc, char **argv)
{
    int level;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    if (argc != 3) {
        fprintf(stderr, "usage: watchdog_probe STALLED_RANK TIMEOUT_SECONDS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int stalled = atoi(argv[1]);
    dp_comm c;
    check(dp_comm_init(&c, MPI_COMM_WORLD, "ring"), 0);
    dp_watchdog w;
    check(dp_watchdog_start(&w, &c, atof(argv[2])), c.rank);
    c.watchdog = &w;
    dp_watchdog_set_step(&w, 7);
    static float grads[BUCKETS * BUCKET_FLOATS];
    dp_request *bucket[BUCKETS];
    int started = c.rank == stalled ? BUCKETS - 1 : BUCKETS;
    for (int b = 0; b < started; b++) {
        char label[32];
        snprintf(label, sizeof label, "bucket %d", b);
        check(dp_comm_start_allreduce(&c, grads + b * BUCKET_FLOATS, BUCKET_FLOATS, label, &bucket[b]), c.rank);
    }
    if (c.rank == stalled)
        check(dp_comm_wait_all(&c), c.rank);
    for (;;) {
        pause_briefly(); /* computing */
        if (c.rank != stalled)
            check(dp_comm_progress(&c), c.rank);
    }
}
