/* Inside a request: what every algorithm's driver sees. Hand-written algorithms are
 * schedules: lists of phases, each a function that gives round i of the phase (the messages
 * to post and the sum to form once they have arrived); schedule.c posts the rounds and
 * advances them when tested. mpi and nccl hand the whole collective to their library. */
#ifndef DP_COMM_REQUEST_H
#define DP_COMM_REQUEST_H

#include "dp/comm.h"
#include "dp/partition.h"
#include "dp/watchdog.h"

#include <mpi.h>
#include <pthread.h>
#include <stddef.h>

/* Largest element count one MPI call takes (counts are int); bigger messages go in chunks. */
#define DP_MPI_MAX_CHUNK ((size_t)1 << 30)

/* Elements in the chunk that starts at `done` of `total`. */
static inline int dp_mpi_chunk(size_t total, size_t done)
{
    return (int)(total - done < DP_MPI_MAX_CHUNK ? total - done : DP_MPI_MAX_CHUNK);
}

enum {
    DP_MAX_CHUNKS = 64,     /* chunks per message: a request moves up to 64 Gi floats */
    DP_LABEL_MAX = 64
};

/* What a request's elements are (elements.c): their size, sum and way to and from float. */
typedef struct dp_element {
    size_t size;
    const char *name;
    void (*add)(void *into, const void *from, size_t count); /* into[i] += from[i] */
    /* The request's floats to elements in place at its start, and back at its end; NULL: floats. */
    void (*narrow)(void *buf, size_t count);
    void (*widen)(void *buf, size_t count);
    int own_sum; /* MPI adds them with the pool's user-defined operation, not MPI_SUM */
} dp_element;

/* By dp_dtype; size 0 where requests do not take the type. */
extern const dp_element dp_elements[DP_DTYPES];

/* The MPI datatype that carries one element of dtype. */
MPI_Datatype dp_element_mpi_type(dp_dtype dtype);

/* The bf16 sum as an MPI operation on MPI_UINT16_T (mpi's collectives), freed with MPI_Op_free. */
int dp_bf16_sum_create(MPI_Op *op);

/* One message of a round; count 0 posts nothing (both sides compute the same count). */
typedef struct dp_transfer {
    void *data;     /* count elements of the request's type */
    size_t count;
    int peer;
} dp_transfer;

/* into[i] += from[i], elements of the request's type: formed once the round's messages have arrived. */
typedef struct dp_sum {
    void *into;
    const void *from;
    size_t count;
} dp_sum;

typedef struct dp_round {
    dp_transfer send, recv;
    dp_sum sum;
    /* It may be posted while the previous round is still moving (its messages neither read
     * nor overwrite what that round's sum writes): at most two rounds are in flight. */
    int overlaps_previous;
} dp_round;

/* Round `round` (0, 1, ...) of a phase: fills *out and returns 1, or returns 0 when the phase
 * has no such round on this rank. Called with *out zeroed. */
typedef struct dp_request dp_request;
typedef int (*dp_phase_fn)(dp_request *q, int round, dp_round *out);

/* A round posted and not yet complete, with its MPI requests. */
typedef struct dp_flight {
    dp_round round;
    MPI_Request requests[2 * DP_MAX_CHUNKS];
    int count;
} dp_flight;

/* The power-of-two group a recursive algorithm runs on (see fold.c). */
typedef struct dp_fold_plan {
    int group;   /* P: the largest power of two <= W */
    int extra;   /* W - P: ranks that fold into a partner */
    int index;   /* this rank's index among the P, or -1 for a rank that sits out */
} dp_fold_plan;

struct dp_request {
    dp_comm *comm;
    const struct dp_algorithm *algorithm; /* the one running it (auto's pick, for auto) */
    dp_collective kind;
    float *buf;                /* holds count elements of *element once narrowed (offsets: dp_request_at) */
    size_t count, parent_count, parent_offset;
    dp_dtype dtype;
    const dp_element *element;
    int narrowed;              /* buf holds its elements narrowed at the start: widened at completion */
    void *ready_event;
    int joined;                /* completed by dp_request_join on the device, not by progress */
    int tag;                   /* from the start sequence: unique among requests in flight */
    int blocking;              /* started by dp_comm_run: mpi may use MPI's blocking collective */
    int in_use, complete, status;
    uint64_t nvtx_range;       /* its range on Nsight Systems' timeline from start to completion (0: none) */
    char label[DP_LABEL_MAX];
    dp_watch watch;
    int watched;
    /* the schedule driver */
    const dp_phase_fn *phases; /* NULL-terminated */
    int phase, round;          /* the next round to plan */
    dp_round next;
    int has_next;
    dp_flight flights[2];
    int first_flight, flights_used;
    /* algorithm plans, set when the request starts */
    dp_fold_plan fold;
    size_t segment, segments;  /* ring-pipelined: elements per segment, segments per block */
    /* memory kept with the slot and reused */
    float *scratch;            /* elements of the request's type (dp_request_at) */
    size_t scratch_capacity;   /* floats: room for as many elements of up to a float's size */
    int *block_counts, *block_offsets; /* mpi: W each */
    void *driver_state;        /* a driver's own (nccl: CUDA events), freed by its algorithm's close */
    /* hier: the stage it is in, its place among hier's requests, the group request it waits on */
    int stage;
    long sequence;
    dp_request *part;
};

/* hier's groups, kept on its dp_comm (hier.c); their slots count in its allocations and scratch. */
struct dp_hier {
    dp_comm node;           /* this rank's node */
    dp_comm leaders;        /* the nodes' lowest ranks: set up only where in_leaders */
    int in_leaders;
    long started;           /* hier requests started */
    long next_inner;        /* the one whose all-reduce among the leaders starts next */
    uint64_t counted;       /* bytes the groups sent that are already in the dp_comm's traffic */
};

/* Element i of base (q's buffer or scratch), elements being q's type. */
static inline void *dp_request_at(const dp_request *q, void *base, size_t i)
{
    return (char *)base + i * q->element->size;
}

/* Block r of q's buffer (see dp_request_args), as offsets into q->buf. */
dp_range dp_request_block(const dp_request *q, int r);

/* The largest of q's W blocks (the same on every rank). */
size_t dp_request_largest_block(const dp_request *q);

/* How an algorithm's requests are posted and advanced. */
typedef struct dp_driver {
    /* Sets up what a slot needs beyond memory (nccl: communicator, stream, events), at
     * reserve and at each start; idempotent. NULL: nothing. */
    int (*prepare)(dp_request *q);
    /* Posts what can be posted now (may complete q). */
    int (*start)(dp_request *q);
    /* Advances q without waiting; sets q->complete when done. */
    int (*advance)(dp_request *q);
    /* Makes the cudaStream_t `stream` wait for q on the device (dp_request_join). NULL: the
     * algorithm completes on the host only. */
    int (*join)(dp_request *q, void *stream);
} dp_driver;

extern const dp_driver dp_schedule_driver;

/* The slots behind c's requests, and the lock every entry point takes so that a progress
 * thread (progress.c) and the caller take turns; that thread records its failure here. */
struct dp_request_pool {
    dp_request **slots;  /* each allocated once: handles stay valid while the pool grows */
    int capacity;
    /* Kept as lists so that starting and progressing cost what is in flight, not the pool's
     * size (a bucket per KiB makes tens of thousands of slots). */
    dp_request **idle;   /* slots not in use: what a start takes */
    int idle_count;
    dp_request **active; /* started and not complete, in start order: what progress advances */
    int active_count;
    long started;        /* requests started: request n gets tag n mod tag_window */
    long allocations;
    int tag_window;      /* tags 0 .. MPI_TAG_UB */
    pthread_mutex_t lock;
    int thread_status;   /* the progress thread's first failure (0: none), under the lock */
    char thread_error[256]; /* its message (dp_last_error is per thread) */
    MPI_Op bf16_sum;     /* the bf16 sum for mpi's collectives */
};

/* groups.c: c's MPI side over comm (not owned), running algorithm: its rank, private
 * duplicate, request pool and place in its node; collective over comm. dp_comm_init opens a
 * dp_comm with it, hier its groups'. dp_comm_close_mpi frees them. */
int dp_comm_open_mpi(dp_comm *c, MPI_Comm comm, const struct dp_algorithm *algorithm);
void dp_comm_close_mpi(dp_comm *c);

/* request.c: the pool, opened and freed by dp_comm_open_mpi and dp_comm_close_mpi (groups.c). */
int dp_request_pool_open(dp_comm *c);
void dp_request_pool_free(dp_comm *c);

/* dp_comm_progress with c's lock already held. */
int dp_request_progress_locked(dp_comm *c);

/* Waits for one of MPI's own requests on c's ranks while progressing c's requests. */
int dp_request_wait_mpi(dp_comm *c, MPI_Request *request);

/* Starts a on c with the given algorithm and tag instead of c's start sequence: one part of a
 * request of another dp_comm (hier's stages), whose parts may start in different orders on
 * different ranks but get the same tag everywhere. a's buf already holds elements of a's dtype
 * (its parent narrowed them): a part neither narrows nor widens. */
int dp_request_start_part(dp_comm *c, const dp_request_args *a, const struct dp_algorithm *algorithm, int tag,
                          dp_request **request);

/* Starts a with the given algorithm, whatever c's, and waits for it: the blocking forms. */
int dp_request_run(dp_comm *c, const dp_request_args *a, const struct dp_algorithm *algorithm);

/* Bytes counted as sent by q's kind: count elements posted, or modelled (mpi, nccl). */
void dp_request_count_bytes(dp_request *q, size_t elements, int modelled);

/* The elements the ring sends for q: the volume mpi and nccl are counted at. */
size_t dp_request_ring_elements(const dp_request *q);

/* dst[i] += src[i] (elements.c): float32's sum (dp_elements' F32 add), in the order every hand-written
 * algorithm forms it. */
void dp_add_floats(float *restrict dst, const float *restrict src, size_t count);

/* caller_collectives.c: root's bytes to every rank with MPI_Ibcast on the caller's
 * communicator, in pieces, progressing c's requests while it waits. */
int dp_broadcast_bytes(dp_comm *c, void *buf, size_t bytes, int root);

#endif
