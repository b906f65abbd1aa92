/* Collectives on flat float buffers, as requests: start -> test/progress -> wait, with the
 * blocking calls as start + wait. The algorithm is chosen by name. This module knows MPI and
 * nothing of models. Every call works for any count (0 too) and any world size (1 too).
 *
 * A reducer during backward:
 *
 *     dp_comm_reserve(c, largest_bucket, buckets, 0);            before the first step
 *     ...
 *     dp_comm_start_allreduce(c, grads + offset, count, "bucket 3", &bucket[3]);
 *     dp_comm_progress(c);                                        between module backward steps
 *     ...
 *     dp_comm_wait_all(c);                                        before the update
 *
 * Every rank must start the same requests (kind, count, layout, algorithm) in the same order,
 * as MPI requires of collectives; tests and waits may come in any order on any rank. A request
 * moves only while its rank is inside a dp_comm call (or while a progress thread runs), so
 * while requests are outstanding block only in dp_comm calls, which progress them all: a rank
 * blocked in an MPI call of its own leaves the other ranks waiting for its part. */
#ifndef DP_COMM_H
#define DP_COMM_H

#include "dp/partition.h"
#include "dp/tensor.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

struct dp_algorithm;
struct dp_auto_table;
struct dp_watchdog;
struct dp_nccl;
struct dp_progress_thread;
struct dp_request_pool;
struct dp_hier;

/* What a request computes, in place, over the W blocks of its buffer (see dp_request_args). */
typedef enum dp_collective {
    DP_ALLREDUCE,      /* every rank: the sum over ranks of the whole buffer */
    DP_REDUCE_SCATTER, /* rank r: block r holds the sum over ranks of block r; the rest is unspecified */
    DP_ALLGATHER,      /* every rank: block r as rank r holds it, for every r */
    DP_COLLECTIVE_KINDS
} dp_collective;

/* Bytes this rank has handed to the network per collective kind, since dp_comm_init (the
 * caller may zero the struct between steps). Hand-written algorithms count the messages
 * they post; MPI's and NCCL's collectives send what their own algorithm chooses, so they
 * count what the ring would send (its bandwidth-optimal volume), and that share is also
 * added to `modelled`. */
typedef struct dp_comm_traffic {
    uint64_t bytes[DP_COLLECTIVE_KINDS];
    uint64_t modelled[DP_COLLECTIVE_KINDS]; /* the part of bytes[] that is the ring's model */
    uint64_t requests[DP_COLLECTIVE_KINDS]; /* requests started */
} dp_comm_traffic;

typedef struct dp_comm {
    MPI_Comm comm;        /* the caller's communicator (not owned): metric sums, broadcasts */
    MPI_Comm requests_comm; /* a private duplicate: the requests' messages never meet the caller's */
    int rank, size;
    int local_rank, local_size; /* among ranks sharing this node (MPI_COMM_TYPE_SHARED) */
    const struct dp_algorithm *algorithm;
    struct dp_watchdog *watchdog; /* when set, watches every outstanding request and collective */
    size_t segment_bytes;       /* ring-pipelined segment size; 0: DP_SEGMENT_BYTES_DEFAULT */
    struct dp_auto_table *auto_table; /* auto's rules; NULL until loaded or first used */
    int cuda_aware;             /* MPI may be handed GPU memory (dp_comm_set_cuda_aware) */
    struct dp_nccl *nccl;       /* nccl's communicator and stream; NULL until reserved or first used */
    /* hier: the all-reduce among the nodes' leaders (NULL: ring), and its node and leader
     * groups (NULL until reserved or first used) */
    const struct dp_algorithm *hier_inner;
    struct dp_hier *hier;
    int node;                   /* this rank's node number; -1: the ranks sharing memory (see dp_comm_split_group) */
    void *device_stream;        /* the cudaStream_t the device computes on, which nccl's requests
                                 * order after (dp_backend.stream); NULL: the legacy default stream */
    struct dp_request_pool *pool; /* request slots with their scratch memory */
    struct dp_progress_thread *progress_thread; /* NULL: none running */
    dp_dtype grad_dtype;        /* --grad-dtype: what the gradients' reductions send and add
                                 * (dp_comm_set_grad_dtype; the strategies' buckets ask for it) */
    dp_comm_traffic traffic;
} dp_comm;

/* Default ring-pipelined segment: big enough that each message's fixed cost (on shared memory,
 * Open MPI's rendezvous and its double-copied first 32 KiB) stays small, small enough that a
 * 16 MiB gradient still gives each block several segments at W <= 4. */
#define DP_SEGMENT_BYTES_DEFAULT ((size_t)1 << 20)

/* Sets up collectives on comm with the named algorithm; an unknown name fails with a message
 * listing the valid ones. Collective over comm (it duplicates it). */
int dp_comm_init(dp_comm *c, MPI_Comm comm, const char *algorithm);

/* Frees the request slots, their scratch and the private communicator. No request may be
 * outstanding. */
void dp_comm_free(dp_comm *c);

const char *dp_comm_algorithm_name(const dp_comm *c);

/* Switches c to the named algorithm (as dp_comm_init names it), keeping its request slots.
 * No request may be outstanding. */
int dp_comm_set_algorithm(dp_comm *c, const char *algorithm);

/* Space-separated names of every algorithm that sums host memory: all that --allreduce
 * accepts but those of dp_comm_gpu_algorithm_names. */
const char *dp_comm_algorithm_names(void);

/* The algorithms that sum GPU memory only ("nccl" when built with NCCL, else ""). */
const char *dp_comm_gpu_algorithm_names(void);

/* --hier-inner: the algorithm hier runs among the nodes' leaders, any registered one that
 * sums host memory but hier itself; fails naming the valid ones. No request may be outstanding. */
int dp_comm_set_hier_inner(dp_comm *c, const char *algorithm);
const char *dp_comm_hier_inner_name(const dp_comm *c);

/* ---- rank groups ---- */

/* Subsets of a dp_comm's ranks, each its own communicator (torch.distributed's new_group):
 * all of them, the ranks of this rank's node, or one leader per node (its lowest rank). */
typedef enum dp_group { DP_GROUP_WORLD, DP_GROUP_NODE, DP_GROUP_LEADERS, DP_GROUP_KINDS } dp_group;

/* A node is the ranks that share memory (MPI_Comm_split_type MPI_COMM_TYPE_SHARED), or, when
 * c->node >= 0, the ranks that set the same number (tests simulate several nodes on one).
 * Collective over c's ranks: *group is a new communicator over this rank's group, ranks in
 * c's order, or MPI_COMM_NULL where this rank is in none (the leaders: every rank but its
 * node's lowest). The caller frees it with MPI_Comm_free. */
int dp_comm_split_group(const dp_comm *c, dp_group group, MPI_Comm *out);

/* The group called name ("world", "node", "leaders"), or DP_EINVAL naming the valid ones. */
int dp_group_parse(const char *name, dp_group *group);
const char *dp_group_name(dp_group group);

/* --grad-dtype: what the gradients' reductions send and add, DP_DTYPE_F32 or DP_DTYPE_BF16 (the
 * strategies start their buckets with it, see dp_request_args.dtype). Other collectives stay
 * float32. */
void dp_comm_set_grad_dtype(dp_comm *c, dp_dtype dtype);
/* Its names, "fp32" and "bf16": parse fails naming the valid ones. */
int dp_grad_dtype_parse(const char *name, dp_dtype *dtype);
const char *dp_grad_dtype_name(dp_dtype dtype);

/* bfloat16 as --grad-dtype bf16 rounds: to nearest even (NaN stays NaN, overflow is infinity),
 * and back (exact). */
uint16_t dp_bf16_from_float(float x);
float dp_bf16_to_float(uint16_t h);

/* --cuda-aware: may MPI be handed GPU memory? */
typedef enum dp_cuda_aware { DP_CUDA_AWARE_AUTO, DP_CUDA_AWARE_ON, DP_CUDA_AWARE_OFF } dp_cuda_aware;

/* What MPI says of itself: 1 it reads and writes GPU memory, 0 it does not, -1 it cannot say
 * (no MPIX_Query_cuda_support: not Open MPI). */
int dp_mpi_cuda_support(void);

/* Sets c->cuda_aware: auto is what MPI says; on fails when MPI says it cannot. */
int dp_comm_set_cuda_aware(dp_comm *c, dp_cuda_aware mode);

/* 1 when gradients held in GPU memory should reach the selected algorithm there: it needs
 * GPU memory (nccl), or only MPI touches the data, MPI is CUDA-aware and the gradients reduce
 * in float32 (bf16 is rounded and summed on the CPU). Otherwise the caller stages them through
 * host memory (device -> host -> algorithm -> device). */
int dp_comm_wants_device_buffer(const dp_comm *c);

/* ---- requests ---- */

/* One started collective. It lives in c's pool from dp_comm_start until a test that finds
 * it complete, or a wait, sets the caller's handle to NULL. */
typedef struct dp_request dp_request;

typedef struct dp_request_args {
    dp_collective kind;
    float *buf;       /* in place: the data, and the result */
    size_t count;     /* floats */
    /* What the data is, named by the watchdog ("bucket 3" -> "the all-reduce of bucket 3");
     * copied. NULL: "a buffer". */
    const char *label;
    /* The blocks. parent_count 0: block r is dp_partition(count, W, r) of buf. Otherwise buf
     * is [parent_offset, parent_offset + count) of a buffer of parent_count floats, and block
     * r is the part of dp_partition(parent_count, W, r) that falls in it (possibly empty):
     * a bucket's reduce-scatter then leaves each rank the bucket's share of its shard of the
     * whole buffer (ZeRO-2), and the ring sums every element in the same order whichever
     * bucket carries it (so bucketed ring all-reduces are bitwise the whole buffer's). */
    size_t parent_count, parent_offset;
    /* nccl only: a cudaEvent_t recorded after the kernels that produce buf; the request's
     * stream waits for it. NULL: one is recorded on c->device_stream at the start. */
    void *ready_event;
    /* What the reduction sends and adds: DP_DTYPE_F32 (the zero value), or DP_DTYPE_BF16 for an
     * all-reduce or reduce-scatter: buf's floats are rounded to bfloat16 at the start (in place
     * on the CPU; nccl on the GPU, into a buffer of its own), every partial sum is formed in
     * float and rounded to bfloat16 again (as NCCL's bf16 reductions), and the result is widened
     * back to floats in buf at completion; half the bytes, and an error of about 2^-8 relative
     * per addition (docs/ALGORITHMS.md). Or DP_DTYPE_I64 for an all-reduce or reduce-scatter:
     * buf holds count int64 values (cast to float *), added as integers (wrapping, so a sum
     * that fits comes out right): exact in any order, every algorithm gives the same bits. */
    dp_dtype dtype;
    /* Device algorithms (nccl) only. 1: the caller completes the request on the device with
     * dp_request_join, never by a test or a wait: its start queries nothing and progress
     * leaves it alone, so it may be started inside a CUDA graph's capture. */
    int joined;
} dp_request_args;

/* Prepares c for up to `requests` requests in flight at once, each of up to max_count floats
 * (parent_count: the largest parent buffer those requests' blocks come from, 0 if none):
 * slots, scratch memory, MPI argument arrays, and for nccl the communicator, stream and
 * events. Collective (nccl connects here). After it, starting and completing such requests
 * allocates nothing (dp_comm_allocations stays put); a larger or further request still works,
 * growing the pool. */
int dp_comm_reserve(dp_comm *c, size_t max_count, int requests, size_t parent_count);

/* Starts a collective with c's algorithm and advances it as far as it goes without waiting.
 * *request is the handle for dp_request_test / dp_request_wait. */
int dp_comm_start(dp_comm *c, const dp_request_args *args, dp_request **request);

/* dp_comm_start of buf's own blocks, labelled. */
int dp_comm_start_allreduce(dp_comm *c, float *buf, size_t count, const char *label, dp_request **request);

/* Advances every outstanding request of c as far as it goes without waiting: the call to
 * make between pieces of computation (docs/ALGORITHMS.md, "Progress"). */
int dp_comm_progress(dp_comm *c);

/* A thread that calls dp_comm_progress every interval_us microseconds (0: without pausing,
 * which takes a core from computation) until stopped (dp_comm_free stops it too): requests
 * then move during computation that cannot be cut into pieces. The caller's own calls still
 * work; the two take turns. Needs MPI_THREAD_MULTIPLE; one per comm. */
int dp_comm_start_progress_thread(dp_comm *c, long interval_us);
void dp_comm_stop_progress_thread(dp_comm *c);

/* dp_comm_progress, then *done = 1 and *request = NULL when this request has completed. */
int dp_request_test(dp_request **request, int *done);
/* dp_request_test without the progress: for checking many requests after one dp_comm_progress. */
int dp_request_collect(dp_request **request, int *done);

/* Advances every outstanding request until this one has completed; *request = NULL. */
int dp_request_wait(dp_request **request);

/* A request started with args.joined, completed on the device: the cudaStream_t `stream`
 * waits for the collective (an event wait queued there: the host neither waits nor queries),
 * so work queued on it afterwards reads the result; *request = NULL. */
int dp_request_join(dp_request **request, void *stream);

/* Whether c's algorithm completes requests on the device (dp_request_join: nccl). */
int dp_comm_joins_on_device(const dp_comm *c);

/* Waits for every outstanding request of c. Handles still held become invalid. */
int dp_comm_wait_all(dp_comm *c);

/* Requests started and not yet completed. */
int dp_comm_outstanding(const dp_comm *c);

/* Times c has allocated memory for requests (slots, scratch, arrays), reserve included. */
long dp_comm_allocations(const dp_comm *c);

/* ---- blocking collectives: start + wait ---- */

/* dp_comm_start then dp_request_wait. Results are those of the request, except that mpi's
 * blocking forms are MPI's blocking collectives (see docs/ALGORITHMS.md). */
int dp_comm_run(dp_comm *c, const dp_request_args *args);

/* In place: buf = sum over ranks of buf, with the selected algorithm. Identical on every
 * rank (bitwise). The watchdog names it "the all-reduce of the gradient". */
int dp_comm_allreduce_sum(dp_comm *c, float *buf, size_t count);

/* Reduce-scatter and all-gather over the blocks of dp_partition(count, size, r), in place,
 * with the selected algorithm (DP_REDUCE_SCATTER, DP_ALLGATHER). */
int dp_comm_reduce_scatter(dp_comm *c, float *buf, size_t count);
int dp_comm_allgather(dp_comm *c, float *buf, size_t count);

/* The same with a fixed algorithm, whatever c's: the ring takes any count; the MPI forms
 * (MPI_Reduce_scatter, MPI_Allgatherv) take counts up to INT_MAX, as MPI's int counts and
 * displacements allow. */
int dp_reduce_scatter_ring(dp_comm *c, float *buf, size_t count);
int dp_allgather_ring(dp_comm *c, float *buf, size_t count);
int dp_reduce_scatter_mpi(dp_comm *c, float *buf, size_t count);
int dp_allgather_mpi(dp_comm *c, float *buf, size_t count);

/* In place sum of a few doubles (metrics: loss sums, counts) with MPI_Allreduce. */
int dp_comm_sum_doubles(dp_comm *c, double *values, int count);
/* Waits for one of MPI's own requests on c's ranks, started by the caller, as the collectives
 * above wait: watched (`what` names it in the watchdog's report), c's requests progressed. */
int dp_comm_wait_mpi(dp_comm *c, MPI_Request *request, const char *what);

/* Rank r's block of dp_partition(total, W, r) to rank root, where all (total floats) gets
 * every block; mine holds this rank's block (on root it may already be in place in all).
 * Blocks of more than INT_MAX floats are refused (MPI's int counts). ZeRO's checkpoints. */
int dp_comm_gather_blocks(dp_comm *c, const float *mine, float *all, size_t total, int root);
/* The same for the window [window.begin, window.end) of the total alone: rank r sends the part
 * of its block inside the window, and all (window's size) gets the window on root. */
int dp_comm_gather_window(dp_comm *c, const float *mine, float *all, size_t total, dp_range window, int root);
/* The reverse: root's all (total floats) sends rank r its block, into mine. */
int dp_comm_scatter_blocks(dp_comm *c, const float *all, float *mine, size_t total, int root);

/* Every rank's 64-bit value into all[rank] on every rank (replica checks). */
int dp_comm_gather_hashes(dp_comm *c, uint64_t mine, uint64_t *all);

/* Root's bytes to every rank. */
int dp_comm_broadcast(dp_comm *c, void *buf, size_t bytes, int root);

/* Records an MPI error (call text, file, line, MPI's message) and returns DP_EMPI. */
int dp_mpi_fail(int status, const char *call, const char *file, int line);

#define DP_MPI_CHECK(call)                                                   \
    do {                                                                     \
        int dp_mpi_status_ = (call);                                         \
        if (dp_mpi_status_ != MPI_SUCCESS)                                   \
            return dp_mpi_fail(dp_mpi_status_, #call, __FILE__, __LINE__);  \
    } while (0)

#endif
