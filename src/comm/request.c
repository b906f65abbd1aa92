/* Requests: a pool of slots, each with its own scratch memory, reused request after request;
 * start, progress, test and wait; the tags that keep requests in flight apart; the watchdog's
 * view of them; the bytes they send. Every entry point holds the pool's lock, so a progress
 * thread (progress.c) and the caller take turns. */
#include "config.h"

#include "src/comm/algorithms.h"

#include "dp/error.h"
#include "dp/memory.h"
#include "dp/nvtx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[DP_COLLECTIVE_KINDS] = {"all-reduce", "reduce-scatter", "all-gather"};

int dp_request_pool_open(dp_comm *c)
{
    c->pool = dp_calloc(1, sizeof *c->pool, "the request pool");
    if (!c->pool)
        return DP_ENOMEM;
    /* Recursive: a start may wait for a collective (nccl's first connection) that progresses. */
    pthread_mutexattr_t recursive;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&c->pool->lock, &recursive);
    pthread_mutexattr_destroy(&recursive);
    int *tag_ub = NULL, found = 0;
    DP_MPI_CHECK(MPI_Comm_get_attr(c->requests_comm, MPI_TAG_UB, &tag_ub, &found));
    /* Any window larger than the requests ever in flight keeps their tags apart. */
    c->pool->tag_window = found && *tag_ub < 1 << 30 ? *tag_ub + 1 : 1 << 30;
    c->pool->bf16_sum = MPI_OP_NULL;
    return dp_bf16_sum_create(&c->pool->bf16_sum);
}

void dp_request_pool_free(dp_comm *c)
{
    if (!c->pool)
        return;
    for (int i = 0; i < c->pool->capacity; i++) {
        dp_request *q = c->pool->slots[i];
        dp_memory_release(q->scratch);
        free(q->scratch);
        free(q->block_counts);
        free(q);
    }
    free(c->pool->slots);
    free(c->pool->idle);
    free(c->pool->active);
    if (c->pool->bf16_sum != MPI_OP_NULL)
        MPI_Op_free(&c->pool->bf16_sum);
    pthread_mutex_destroy(&c->pool->lock);
    free(c->pool);
    c->pool = NULL;
}

/* Grows one of the pool's lists to n entries (the lists never hold more than the slots). */
static int grow_list(dp_request ***list, int n)
{
    dp_request **grown = realloc(*list, (size_t)n * sizeof *grown);
    if (!grown)
        return dp_fail(DP_ENOMEM, "out of memory for request slot %d", n);
    *list = grown;
    return 0;
}

/* A new slot, idle. */
static int new_slot(dp_comm *c, dp_request **slot)
{
    struct dp_request_pool *pool = c->pool;
    int n = pool->capacity + 1;
    if (grow_list(&pool->slots, n) || grow_list(&pool->idle, n) || grow_list(&pool->active, n))
        return DP_ENOMEM;
    dp_request *q = dp_calloc(1, sizeof *q, "a request slot");
    int *blocks = q ? dp_calloc(2 * (size_t)c->size, sizeof(int), "a request's block counts") : NULL;
    if (!blocks) {
        free(q);
        return DP_ENOMEM;
    }
    q->comm = c;
    q->block_counts = blocks;
    q->block_offsets = blocks + c->size;
    pool->slots[pool->capacity++] = q;
    pool->idle[pool->idle_count++] = q;
    pool->allocations += 3;
    *slot = q;
    return 0;
}

/* An idle slot (the one last given back), or a new one; marked in use. */
static int take_slot(dp_comm *c, dp_request **slot)
{
    struct dp_request_pool *pool = c->pool;
    int status = pool->idle_count ? 0 : new_slot(c, slot);
    if (status)
        return status;
    *slot = pool->idle[--pool->idle_count];
    (*slot)->in_use = 1;
    return 0;
}

/* q is no longer in use: idle again. */
static void give_back(dp_request *q)
{
    struct dp_request_pool *pool = q->comm->pool;
    if (q->nvtx_range) /* a request the device completed (joined) */
        dp_nvtx_end(q->nvtx_range);
    q->nvtx_range = 0;
    q->in_use = 0;
    pool->idle[pool->idle_count++] = q;
}

static int ensure_scratch(dp_request *q, size_t floats)
{
    if (floats <= q->scratch_capacity)
        return 0;
    /* Charged to the allocation counter: a strategy's largest message sizes it. */
    const char *what = "a request's scratch memory";
    if (dp_memory_admit(floats * sizeof(float), DP_MEM_COMM, what))
        return DP_ENOMEM;
    float *grown = dp_alloc(floats * sizeof(float), what);
    if (!grown)
        return DP_ENOMEM;
    dp_memory_release(q->scratch);
    free(q->scratch);
    dp_memory_record(grown, floats * sizeof(float), DP_MEM_COMM);
    q->scratch = grown;
    q->scratch_capacity = floats;
    q->comm->pool->allocations++;
    return 0;
}

dp_range dp_request_block(const dp_request *q, int r)
{
    if (!q->parent_count)
        return dp_partition(q->count, q->comm->size, r);
    /* The part of the parent's block r inside [parent_offset, parent_offset + count). */
    dp_range p = dp_partition(q->parent_count, q->comm->size, r);
    size_t lo = q->parent_offset, hi = q->parent_offset + q->count;
    size_t begin = p.begin < lo ? lo : p.begin > hi ? hi : p.begin;
    size_t end = p.end < begin ? begin : p.end > hi ? hi : p.end;
    dp_range block = {begin - lo, end - lo};
    return block;
}

size_t dp_request_largest_block(const dp_request *q)
{
    if (!q->parent_count) /* dp_partition's first block is never smaller than the others */
        return dp_range_size(dp_partition(q->count, q->comm->size, 0));
    size_t largest = 0;
    for (int r = 0; r < q->comm->size; r++) {
        size_t n = dp_range_size(dp_request_block(q, r));
        largest = n > largest ? n : largest;
    }
    return largest;
}

size_t dp_request_ring_elements(const dp_request *q)
{
    /* The ring's reduce-scatter sends every block but this rank's, its all-gather every
     * block but the right neighbour's. */
    int right = (q->comm->rank + 1) % q->comm->size;
    size_t reduce_scatter = q->count - dp_range_size(dp_request_block(q, q->comm->rank));
    size_t allgather = q->count - dp_range_size(dp_request_block(q, right));
    return q->kind == DP_ALLREDUCE ? reduce_scatter + allgather
           : q->kind == DP_REDUCE_SCATTER ? reduce_scatter : allgather;
}

void dp_request_count_bytes(dp_request *q, size_t elements, int modelled)
{
    uint64_t bytes = (uint64_t)elements * q->element->size;
    q->comm->traffic.bytes[q->kind] += bytes;
    if (modelled)
        q->comm->traffic.modelled[q->kind] += bytes;
}

static void describe_size(size_t bytes, char *out, size_t size)
{
    if (bytes >= (size_t)1 << 20)
        snprintf(out, size, "%.1f MiB", (double)bytes / (1 << 20));
    else if (bytes >= 1024)
        snprintf(out, size, "%.1f KiB", (double)bytes / 1024);
    else
        snprintf(out, size, "%zu B", bytes);
}

static int watch(dp_request *q)
{
    if (!q->comm->watchdog)
        return 0;
    char size[32];
    describe_size(q->count * q->element->size, size, sizeof size);
    snprintf(q->watch.what, sizeof q->watch.what, "the %s of %s (%s, %s%s%s)", kind_names[q->kind],
             q->label, q->algorithm->name, size, q->dtype == DP_DTYPE_F32 ? "" : " of ",
             q->dtype == DP_DTYPE_F32 ? "" : q->element->name);
    q->watched = 1;
    return dp_watchdog_watch(q->comm->watchdog, &q->watch);
}

/* Records a driver's outcome: a failure completes the request with that status; a completed
 * request leaves the watchdog's list, its result widened back to floats. */
static int settle(dp_request *q, int status)
{
    if (status) {
        q->status = status;
        q->complete = 1;
    }
    if (q->complete && q->nvtx_range) {
        dp_nvtx_end(q->nvtx_range);
        q->nvtx_range = 0;
    }
    if (q->complete && q->narrowed) {
        q->element->widen(q->buf, q->count);
        q->narrowed = 0;
    }
    /* A watchdog stopped first (a run ending on an error, a prefetch still in flight) has no list left. */
    if (q->complete && q->watched && q->comm->watchdog) {
        int unwatched = dp_watchdog_unwatch(q->comm->watchdog, &q->watch);
        status = status ? status : unwatched;
    }
    q->watched = q->watched && !q->complete;
    return status;
}

/* part: a part of another request (tag >= 0: hier's stages), on its parent's elements. */
static int check_args(const dp_request_args *a, int part)
{
    if ((unsigned)a->kind >= DP_COLLECTIVE_KINDS)
        return dp_fail(DP_EINVAL, "collective kind %d: not an all-reduce, reduce-scatter or all-gather",
                       (int)a->kind);
    if (a->count > DP_MAX_CHUNKS * DP_MPI_MAX_CHUNK)
        return dp_fail(DP_EINVAL, "%s of %zu floats: larger than a request takes (%zu floats)",
                       kind_names[a->kind], a->count, DP_MAX_CHUNKS * DP_MPI_MAX_CHUNK);
    if (a->parent_count && (a->parent_offset > a->parent_count || a->count > a->parent_count - a->parent_offset))
        return dp_fail(DP_EINVAL, "%s of [%zu, %zu + %zu): outside its parent buffer of %zu floats",
                       kind_names[a->kind], a->parent_offset, a->parent_offset, a->count, a->parent_count);
    if ((unsigned)a->dtype >= DP_DTYPES || !dp_elements[a->dtype].size)
        return dp_fail(DP_EINVAL, "%s of %s: a request's elements are float32, or bfloat16 or int64 for reductions",
                       kind_names[a->kind], a->label ? a->label : "a buffer");
    if (a->dtype != DP_DTYPE_F32 && a->kind == DP_ALLGATHER && !part)
        return dp_fail(DP_EINVAL, "all-gather of %s in %s: an all-gather moves values unchanged, only reductions "
                       "take bfloat16 or int64", a->label ? a->label : "a buffer", dp_elements[a->dtype].name);
    return 0;
}

/* tag < 0: the next of the start sequence. */
static void fill(dp_request *q, const dp_request_args *a, const struct dp_algorithm *algorithm, int blocking,
                 int tag)
{
    struct dp_request_pool *pool = q->comm->pool;
    q->algorithm = algorithm;
    q->kind = a->kind;
    q->buf = a->buf;
    q->count = a->count;
    q->parent_count = a->parent_count;
    q->parent_offset = a->parent_offset;
    q->dtype = a->dtype;
    q->element = &dp_elements[a->dtype];
    q->narrowed = 0;
    q->ready_event = a->ready_event;
    q->joined = a->joined;
    q->blocking = blocking;
    q->tag = tag >= 0 ? tag % pool->tag_window : (int)(pool->started++ % pool->tag_window);
    q->complete = 1; /* until its driver starts it: progress must not touch it before */
    q->status = 0;
    /* Copied, not formatted: this runs for every request, snprintf is measurable at 4 bytes. */
    const char *label = a->label ? a->label : "a buffer";
    size_t n = strnlen(label, sizeof q->label - 1);
    memcpy(q->label, label, n);
    q->label[n] = '\0';
}

static int start_locked(dp_comm *c, const dp_request_args *a, const struct dp_algorithm *algorithm,
                        int blocking, int tag, dp_request **request)
{
    int part = tag >= 0;
    int status = check_args(a, part);
    if (!status && algorithm->pick)
        status = algorithm->pick(c, a->count * dp_elements[a->dtype].size, &algorithm);
    if (!status && a->joined && !algorithm->driver->join)
        status = dp_fail(DP_EINVAL, "the %s of %s: %s completes collectives on the host, so a device stream "
                         "cannot wait for it (--allreduce nccl can)", kind_names[a->kind],
                         a->label ? a->label : "a buffer", algorithm->name);
    dp_request *q = NULL;
    if (!status)
        status = take_slot(c, &q);
    if (status)
        return status;
    fill(q, a, algorithm, blocking, tag);
    q->nvtx_range = part ? 0 : dp_nvtx_start(kind_names[a->kind], q->label);
    c->traffic.requests[a->kind]++;
    /* An algorithm counts its scratch in elements of up to a float's size: wider ones need more. */
    size_t floats_per_element = (q->element->size + sizeof(float) - 1) / sizeof(float);
    status = ensure_scratch(q, floats_per_element *
                                   algorithm->scratch_floats(c, q->kind, q->count, dp_request_largest_block(q)));
    if (!status && algorithm->driver->prepare)
        status = algorithm->driver->prepare(q);
    if (!status)
        status = watch(q);
    if (!status && q->count) { /* a count of 0 moves nothing, on any rank */
        q->complete = 0;
        /* GPU memory (nccl) is narrowed on the device, by the algorithm itself. */
        if (q->element->narrow && !part && algorithm->place != DP_BUFFER_DEVICE) {
            q->element->narrow(q->buf, q->count);
            q->narrowed = 1;
        }
        status = algorithm->driver->start(q);
    }
    status = settle(q, status);
    if (status) {
        give_back(q);
        return status;
    }
    if (!q->complete && !q->joined) /* a joined one is the device's to complete */
        c->pool->active[c->pool->active_count++] = q;
    *request = q;
    return 0;
}

static int start(dp_comm *c, const dp_request_args *a, const struct dp_algorithm *algorithm, int blocking,
                 int tag, dp_request **request)
{
    *request = NULL;
    if (!c->pool)
        return dp_fail(DP_EINVAL, "dp_comm used before dp_comm_init or after dp_comm_free");
    pthread_mutex_lock(&c->pool->lock);
    int status = start_locked(c, a, algorithm, blocking, tag, request);
    pthread_mutex_unlock(&c->pool->lock);
    return status;
}

int dp_comm_start(dp_comm *c, const dp_request_args *args, dp_request **request)
{
    return start(c, args, c->algorithm, 0, -1, request);
}

int dp_request_start_part(dp_comm *c, const dp_request_args *a, const struct dp_algorithm *algorithm, int tag,
                          dp_request **request)
{
    return start(c, a, algorithm, 0, tag, request);
}

static int start_kind(dp_comm *c, dp_collective kind, float *buf, size_t count, const char *label,
                      dp_request **request)
{
    dp_request_args a = {.kind = kind, .buf = buf, .count = count, .label = label};
    return dp_comm_start(c, &a, request);
}

int dp_comm_start_allreduce(dp_comm *c, float *buf, size_t count, const char *label, dp_request **request)
{
    return start_kind(c, DP_ALLREDUCE, buf, count, label, request);
}

/* The progress thread's failure, reported to the caller by every call after it (0: none). */
static int thread_failure(const dp_comm *c)
{
    const struct dp_request_pool *pool = c->pool;
    return pool->thread_status ? dp_fail(pool->thread_status, "progress thread: %s", pool->thread_error) : 0;
}

int dp_request_progress_locked(dp_comm *c)
{
    struct dp_request_pool *pool = c->pool;
    int status = thread_failure(c), kept = 0;
    for (int i = 0; i < pool->active_count; i++) {
        dp_request *q = pool->active[i];
        if (!status && !q->complete)
            status = settle(q, q->algorithm->driver->advance(q));
        if (!q->complete) /* the completed leave the list, the others keep their order */
            pool->active[kept++] = q;
    }
    pool->active_count = kept;
    return status;
}

int dp_comm_progress(dp_comm *c)
{
    pthread_mutex_lock(&c->pool->lock);
    int status = dp_request_progress_locked(c);
    pthread_mutex_unlock(&c->pool->lock);
    return status;
}

int dp_request_test(dp_request **request, int *done)
{
    dp_request *q = *request;
    struct dp_request_pool *pool = q->comm->pool;
    pthread_mutex_lock(&pool->lock);
    int status = dp_request_progress_locked(q->comm);
    *done = q->complete;
    if (q->complete) {
        *request = NULL;
        give_back(q);
        status = q->status ? q->status : status;
    }
    pthread_mutex_unlock(&pool->lock);
    return status;
}

int dp_request_collect(dp_request **request, int *done)
{
    dp_request *q = *request;
    struct dp_request_pool *pool = q->comm->pool;
    pthread_mutex_lock(&pool->lock);
    int status = 0;
    *done = q->complete;
    if (q->complete) {
        *request = NULL;
        give_back(q);
        status = q->status;
    }
    pthread_mutex_unlock(&pool->lock);
    return status;
}

int dp_request_wait(dp_request **request)
{
    /* Waiting progresses every request: a rank waiting for one must still do its part in
     * the others, which other ranks may be waiting for. */
    int done = 0, status = 0;
    while (!status && !done)
        status = dp_request_test(request, &done);
    return status;
}

int dp_request_join(dp_request **request, void *stream)
{
    dp_request *q = *request;
    struct dp_request_pool *pool = q->comm->pool;
    pthread_mutex_lock(&pool->lock);
    int status = q->joined ? 0 : dp_fail(DP_EINVAL, "the %s of %s was not started to be joined on the device",
                                         kind_names[q->kind], q->label);
    if (!status && !q->complete) {
        status = q->algorithm->driver->join(q, stream);
        q->complete = 1;
    }
    status = settle(q, status);
    *request = NULL;
    give_back(q);
    status = status ? status : q->status;
    pthread_mutex_unlock(&pool->lock);
    return status;
}

int dp_comm_joins_on_device(const dp_comm *c)
{
    return c->algorithm->driver->join != NULL;
}

int dp_request_wait_mpi(dp_comm *c, MPI_Request *request)
{
    for (int done = 0;;) {
        DP_MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
        int status = done ? 0 : dp_comm_progress(c);
        if (done || status)
            return status;
    }
}

/* Slot i if it holds a request not yet collected, else NULL. */
static dp_request *held(dp_comm *c, int i)
{
    pthread_mutex_lock(&c->pool->lock);
    dp_request *q = i < c->pool->capacity && c->pool->slots[i]->in_use ? c->pool->slots[i] : NULL;
    pthread_mutex_unlock(&c->pool->lock);
    return q;
}

int dp_comm_wait_all(dp_comm *c)
{
    int status = 0;
    for (int i = 0; i < c->pool->capacity && !status; i++) {
        dp_request *q = held(c, i);
        if (q)
            status = dp_request_wait(&q);
    }
    return status;
}

static int outstanding_locked(const dp_comm *c)
{
    int outstanding = 0;
    for (int i = 0; i < c->pool->active_count; i++)
        outstanding += !c->pool->active[i]->complete;
    return outstanding;
}

int dp_comm_outstanding(const dp_comm *c)
{
    if (!c->pool)
        return 0;
    pthread_mutex_lock(&c->pool->lock);
    int outstanding = outstanding_locked(c);
    pthread_mutex_unlock(&c->pool->lock);
    return outstanding;
}

long dp_comm_allocations(const dp_comm *c)
{
    long own = c->pool ? c->pool->allocations : 0;
    if (!c->hier)
        return own;
    return own + dp_comm_allocations(&c->hier->node) + dp_comm_allocations(&c->hier->leaders);
}

int dp_request_run(dp_comm *c, const dp_request_args *a, const struct dp_algorithm *algorithm)
{
    dp_request *q;
    int status = start(c, a, algorithm, 1, -1, &q);
    return status ? status : dp_request_wait(&q);
}

/* Slots and scratch for `requests` requests of up to max_count floats. */
static int reserve_locked(dp_comm *c, size_t max_count, int requests, size_t parent_count)
{
    if (outstanding_locked(c))
        return dp_fail(DP_EINVAL, "dp_comm_reserve with %d request(s) outstanding: reserve before starting any",
                       outstanding_locked(c));
    size_t own_block = dp_range_size(dp_partition(max_count, c->size, 0));
    size_t parent_block = dp_range_size(dp_partition(parent_count, c->size, 0));
    size_t largest_block = parent_count ? (parent_block < max_count ? parent_block : max_count) : own_block;
    size_t need = 0;
    for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++) {
        size_t n = c->algorithm->scratch_floats(c, (dp_collective)kind, max_count, largest_block);
        need = n > need ? n : need;
    }
    int status = 0;
    for (int i = 0; !status && i < requests; i++) {
        dp_request *q;
        status = i < c->pool->capacity ? (q = c->pool->slots[i], 0) : new_slot(c, &q);
        if (!status)
            status = ensure_scratch(q, need);
        if (!status && c->algorithm->driver->prepare) {
            q->algorithm = c->algorithm;
            status = c->algorithm->driver->prepare(q);
        }
    }
    if (!status && c->algorithm->reserve)
        status = c->algorithm->reserve(c, max_count, requests, parent_count);
    return status;
}

int dp_comm_reserve(dp_comm *c, size_t max_count, int requests, size_t parent_count)
{
    pthread_mutex_lock(&c->pool->lock);
    int status = reserve_locked(c, max_count, requests, parent_count);
    pthread_mutex_unlock(&c->pool->lock);
    return status;
}
