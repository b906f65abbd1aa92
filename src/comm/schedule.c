/* The schedule driver: runs a hand-written algorithm's phases round by round with
 * nonblocking point-to-point messages. A round's messages are posted, and when a test finds
 * them complete its sum is formed and the next round posted, so a request advances only
 * when its rank calls into dp_comm (test, progress, wait). A round that allows it is posted
 * while the previous one is still moving (ring-pipelined), never more than two at once.
 * Every sum is formed by the same additions, in the same order, as the algorithm's blocking
 * form always made them: the results are bitwise the same. */
#include "src/comm/algorithms.h"

#include "dp/error.h"

#include <string.h>

/* The next round of q's phases into q->next; has_next = 0 once every phase is over. */
static void plan_next(dp_request *q)
{
    for (; q->phases[q->phase]; q->phase++, q->round = 0) {
        memset(&q->next, 0, sizeof q->next);
        if (q->phases[q->phase](q, q->round, &q->next)) {
            /* A phase's first round works on the previous phase's results. */
            if (q->round == 0)
                q->next.overlaps_previous = 0;
            q->round++;
            q->has_next = 1;
            return;
        }
    }
    q->has_next = 0;
}

/* One message in chunks MPI's int counts hold; the receiver chunks it the same way, and MPI
 * matches messages of one sender and tag in order. */
static int post_transfer(dp_request *q, dp_flight *f, const dp_transfer *t, int sending)
{
    MPI_Comm comm = q->comm->requests_comm;
    MPI_Datatype type = dp_element_mpi_type(q->dtype);
    for (size_t done = 0; done < t->count; done += DP_MPI_MAX_CHUNK) {
        int n = dp_mpi_chunk(t->count, done);
        MPI_Request *r = &f->requests[f->count++];
        void *data = dp_request_at(q, t->data, done);
        if (sending)
            DP_MPI_CHECK(MPI_Isend(data, n, type, t->peer, q->tag, comm, r));
        else
            DP_MPI_CHECK(MPI_Irecv(data, n, type, t->peer, q->tag, comm, r));
    }
    if (sending)
        dp_request_count_bytes(q, t->count, 0);
    return 0;
}

static int post_next(dp_request *q)
{
    dp_flight *f = &q->flights[(q->first_flight + q->flights_used) % 2];
    f->round = q->next;
    f->count = 0;
    q->flights_used++;
    /* Receive first, so a partner's message finds its buffer. */
    int status = post_transfer(q, f, &f->round.recv, 0);
    if (!status)
        status = post_transfer(q, f, &f->round.send, 1);
    plan_next(q);
    return status;
}

/* The oldest round in flight, if its messages have arrived: its sum is formed. */
static int complete_oldest(dp_request *q, int *completed)
{
    dp_flight *f = &q->flights[q->first_flight];
    int done = 1;
    if (f->count)
        DP_MPI_CHECK(MPI_Testall(f->count, f->requests, &done, MPI_STATUSES_IGNORE));
    *completed = done;
    if (!done)
        return 0;
    const dp_sum *s = &f->round.sum;
    if (s->count)
        q->element->add(s->into, s->from, s->count);
    f->count = 0;
    q->first_flight ^= 1;
    q->flights_used--;
    return 0;
}

static int advance(dp_request *q)
{
    for (;;) {
        int moved = 0, status = 0;
        if (q->flights_used)
            status = complete_oldest(q, &moved);
        int may_post = q->flights_used == 0 || (q->flights_used == 1 && q->next.overlaps_previous);
        if (!status && q->has_next && may_post) {
            status = post_next(q);
            moved = 1;
        }
        if (status)
            return status;
        if (!q->has_next && !q->flights_used) {
            q->complete = 1;
            return 0;
        }
        if (!moved)
            return 0;
    }
}

static int start(dp_request *q)
{
    q->phases = q->algorithm->phases[q->kind];
    q->phase = q->round = 0;
    q->first_flight = q->flights_used = 0;
    if (q->algorithm->plan)
        q->algorithm->plan(q);
    plan_next(q);
    return advance(q);
}

const dp_driver dp_schedule_driver = {.start = start, .advance = advance};

size_t dp_scratch_none(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block)
{
    (void)c, (void)kind, (void)count, (void)largest_block;
    return 0;
}

size_t dp_scratch_whole(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block)
{
    (void)c, (void)largest_block;
    return kind == DP_ALLGATHER ? 0 : count;
}
