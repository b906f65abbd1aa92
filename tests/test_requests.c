/* Multi-rank: run under mpirun for W = 1..8 (tests/requests-wN.sh). Every algorithm's
 * requests (all-reduce, reduce-scatter, all-gather) against MPI's own collectives on the
 * awkward counts with 1, 2 and 8 in flight; waits in different orders on different ranks;
 * the ring's and rhd's all-reduce equal to their reduce-scatter + all-gather bit for bit;
 * buckets of a parent buffer; reserved slots that allocate nothing; a progress thread; bytes
 * counted. A deadlock fails through the script's timeout. */
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/partition.h"
#include "tests/collective_data.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ring-pipelined: the large counts get many segments, two rounds in flight (test_collectives
 * covers tiny segments on every count). */
enum { MAX_IN_FLIGHT = 8, NAME_LIST = 1024, SEGMENT_BYTES = 64 * 1024 };

static const char *const kind_names[DP_COLLECTIVE_KINDS] = {"all-reduce", "reduce-scatter", "all-gather"};

/* One request of a test: its input and what it must leave on this rank. */
typedef struct job {
    dp_collective kind;
    size_t count;
    float *buf, *expected;
    dp_range checked;    /* where buf must equal expected: all of it, or this rank's block */
    dp_request *request;
} job;

/* Exact inputs (all-reduce, reduce-scatter) or owner-marked blocks (all-gather), and the
 * result MPI's own collectives give (sum: MPI_Allreduce of the exact input, if known). */
static void prepare_exact_with(job *j, dp_collective kind, size_t count, const float *sum)
{
    j->kind = kind;
    j->count = count;
    j->request = NULL;
    dp_range mine = dp_partition(count, world_size, world_rank);
    j->checked = kind == DP_REDUCE_SCATTER ? mine : whole(count);
    if (kind != DP_ALLGATHER) {
        j->buf = exact_input(count);
        j->expected = sum ? copy_of(sum, count) : mpi_sum(j->buf, count, 0);
        return;
    }
    j->buf = guarded(count);
    j->expected = guarded(count);
    for (int owner = 0; owner < world_size; owner++) {
        dp_range block = dp_partition(count, world_size, owner);
        for (size_t i = block.begin; i < block.end; i++)
            j->expected[i] = owned_value(owner, i);
    }
    for (size_t i = 0; i < count; i++)
        j->buf[i] = i >= mine.begin && i < mine.end ? j->expected[i] : -1.0f;
}

static void prepare_exact(job *j, dp_collective kind, size_t count)
{
    prepare_exact_with(j, kind, count, NULL);
}

static int job_ok(const job *j)
{
    size_t n = dp_range_size(j->checked);
    return memcmp(j->buf + j->checked.begin, j->expected + j->checked.begin, n * sizeof(float)) == 0 &&
           guard_intact(j->buf, j->count);
}

static void release(job *j)
{
    free(j->buf);
    free(j->expected);
}

/* Checked on this rank alone: while requests are outstanding a rank may block only inside
 * dp_comm, which progresses them (comm.h), not in a collective of its own. */
static void start_job(dp_comm *c, job *j)
{
    dp_request_args a = {.kind = j->kind, .buf = j->buf, .count = j->count, .label = kind_names[j->kind]};
    ck_assert_msg(dp_comm_start(c, &a, &j->request) == 0, "start %s of %zu: %s", kind_names[j->kind],
                  j->count, dp_last_error());
}

/* Waits for the n jobs in an order that differs by rank: rotated by the rank, reversed on
 * odd ranks, every other one by polling dp_request_test. */
static void wait_in_rank_order(job *jobs, int n)
{
    for (int k = 0; k < n; k++) {
        int i = (world_rank % 2 ? n - 1 - k : k) + world_rank;
        job *j = &jobs[i % n];
        int status = 0;
        if (k % 2) {
            for (int done = 0; !status && !done;)
                status = dp_request_test(&j->request, &done);
        } else
            status = dp_request_wait(&j->request);
        ck_assert_msg(status == 0 && j->request == NULL, "%s", dp_last_error());
    }
}

/* Every (count, kind) once, in batches of `in_flight` started together: the results equal
 * MPI's exactly and nothing past a buffer changes. The two large counts (the last two) only
 * with others in flight when `cases` leaves them out: alone, a schedule's request is its
 * blocking form, which test_collectives and the composition test below run. */
static void check_batches(dp_comm *c, const char *name, int in_flight, int cases)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    float *sums[COUNT_CASES];
    for (int k = 0; k < COUNT_CASES; k++) {
        float *input = exact_input(counts[k]);
        sums[k] = mpi_sum(input, counts[k], 0);
        free(input);
    }
    int total = cases * DP_COLLECTIVE_KINDS;
    for (int first = 0; first < total; first += in_flight) {
        job jobs[MAX_IN_FLIGHT];
        for (int k = 0; k < in_flight; k++) {
            int n = (first + k) % total, c_index = n / DP_COLLECTIVE_KINDS; /* the last batch wraps round */
            prepare_exact_with(&jobs[k], (dp_collective)(n % DP_COLLECTIVE_KINDS), counts[c_index], sums[c_index]);
        }
        for (int k = 0; k < in_flight; k++)
            start_job(c, &jobs[k]);
        wait_in_rank_order(jobs, in_flight);
        for (int k = 0; k < in_flight; k++) {
            ck_assert_msg(all_ok(job_ok(&jobs[k])), "%s W=%d, %d in flight: %s of %zu differs from MPI's",
                          name, world_size, in_flight, kind_names[jobs[k].kind], jobs[k].count);
            release(&jobs[k]);
        }
    }
    ck_assert_int_eq(dp_comm_outstanding(c), 0);
    for (int k = 0; k < COUNT_CASES; k++)
        free(sums[k]);
}

/* for_each(c, name) on a comm of every host algorithm. */
static void for_every_algorithm(void (*check)(dp_comm *c, const char *name))
{
    char names[NAME_LIST];
    snprintf(names, sizeof names, "%s", dp_comm_algorithm_names());
    char *save = NULL;
    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        dp_comm c;
        open_comm(&c, name);
        c.segment_bytes = SEGMENT_BYTES;
        check(&c, name);
        dp_comm_free(&c);
    }
}

static void batches_of_1_2_and_8(dp_comm *c, const char *name)
{
    /* mpi's blocking forms are MPI's blocking collectives: its requests alone need their own run. */
    check_batches(c, name, 1, strcmp(name, "mpi") == 0 ? COUNT_CASES : COUNT_CASES - 2);
    check_batches(c, name, 2, COUNT_CASES);
    check_batches(c, name, MAX_IN_FLIGHT, COUNT_CASES);
}

START_TEST(every_algorithm_matches_mpi_with_1_2_and_8_requests_in_flight)
{
    for_every_algorithm(batches_of_1_2_and_8);
}
END_TEST

/* Rounded inputs, 8 in flight: each request's result is bitwise what the same collective run
 * alone (blocking) gives, and the same on every rank. mpi's requests are libnbc's, which may
 * round unlike its blocking collectives: within rounding of MPI_Allreduce instead. */
static void concurrent_equals_alone(dp_comm *c, const char *name)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    float *input[MAX_IN_FLIGHT], *together[MAX_IN_FLIGHT];
    dp_request *requests[MAX_IN_FLIGHT];
    for (int k = 0; k < MAX_IN_FLIGHT; k++) {
        dp_request_args a = {.kind = (dp_collective)(k % DP_COLLECTIVE_KINDS), .count = counts[k % COUNT_CASES]};
        input[k] = random_input(a.count);
        a.buf = together[k] = copy_of(input[k], a.count);
        ck_assert_msg(dp_comm_start(c, &a, &requests[k]) == 0, "%s", dp_last_error());
    }
    ck_assert(all_ok(dp_comm_wait_all(c) == 0));
    for (int k = 0; k < MAX_IN_FLIGHT; k++) {
        dp_request_args a = {.kind = (dp_collective)(k % DP_COLLECTIVE_KINDS), .count = counts[k % COUNT_CASES]};
        dp_range checked = a.kind == DP_REDUCE_SCATTER ? dp_partition(a.count, world_size, world_rank) : whole(a.count);
        int ok;
        if (strcmp(name, "mpi") == 0) {
            float *expected = mpi_sum(input[k], a.count, 0), *abs_sum = mpi_sum(input[k], a.count, 1);
            ok = a.kind == DP_ALLGATHER || close_to(together[k], expected, abs_sum, checked);
            free(expected);
            free(abs_sum);
        } else {
            a.buf = copy_of(input[k], a.count);
            ck_assert(all_ok(dp_comm_run(c, &a) == 0));
            ok = memcmp(a.buf + checked.begin, together[k] + checked.begin, dp_range_size(checked) * sizeof(float)) == 0;
            free(a.buf);
        }
        ck_assert_msg(all_ok(ok && guard_intact(together[k], a.count)),
                      "%s W=%d: %s of %zu with 7 others in flight differs from it alone", name, world_size,
                      kind_names[a.kind], a.count);
        if (a.kind != DP_REDUCE_SCATTER)
            ck_assert_msg(dp_test_same_on_every_rank(together[k], a.count * sizeof(float)),
                          "%s W=%d: ranks hold different results of %zu", name, world_size, a.count);
        free(input[k]);
        free(together[k]);
    }
}

START_TEST(requests_in_flight_round_as_they_do_alone)
{
    for_every_algorithm(concurrent_equals_alone);
}
END_TEST

/* Starts and waits interleaved, with a blocking all-reduce and a metrics sum in the middle,
 * waits in rank-dependent orders: every result right, and no deadlock (the timeout). */
static void interleaved(dp_comm *c, const char *name)
{
    const size_t sizes[] = {1000003, 3, 65536, (size_t)world_size + 1};
    job jobs[4];
    for (int k = 0; k < 4; k++)
        prepare_exact(&jobs[k], (dp_collective)(k % DP_COLLECTIVE_KINDS), sizes[k]);
    start_job(c, &jobs[0]);
    start_job(c, &jobs[1]);
    job blocking;
    prepare_exact(&blocking, DP_ALLREDUCE, 4099);
    ck_assert(dp_comm_allreduce_sum(c, blocking.buf, blocking.count) == 0);
    wait_in_rank_order(&jobs[world_rank % 2], 1); /* rank-dependent: one of the two */
    start_job(c, &jobs[2]);
    double metric = 1.0;
    ck_assert(dp_comm_sum_doubles(c, &metric, 1) == 0 && metric == world_size);
    start_job(c, &jobs[3]);
    ck_assert(dp_comm_wait_all(c) == 0);
    ck_assert(all_ok(job_ok(&blocking)));
    release(&blocking);
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(all_ok(job_ok(&jobs[k])), "%s W=%d: interleaved %s of %zu wrong", name, world_size,
                      kind_names[jobs[k].kind], jobs[k].count);
        release(&jobs[k]);
    }
}

START_TEST(interleaved_starts_and_waits_in_any_order_never_deadlock)
{
    for_every_algorithm(interleaved);
}
END_TEST

/* Random input; *out_first: all-reduce; *out_second: reduce-scatter then all-gather. */
static void allreduce_and_composition(dp_comm *c, size_t count, float **out_first, float **out_second)
{
    float *input = random_input(count);
    float *first = copy_of(input, count), *second = copy_of(input, count);
    dp_request_args a = {.kind = DP_ALLREDUCE, .buf = first, .count = count};
    ck_assert(all_ok(dp_comm_run(c, &a) == 0));
    ck_assert(all_ok(dp_comm_reduce_scatter(c, second, count) == 0 && dp_comm_allgather(c, second, count) == 0));
    free(input);
    *out_first = first;
    *out_second = second;
}

START_TEST(allreduce_is_reduce_scatter_then_allgather_bit_for_bit)
{
    /* mpi is MPI's business; auto picks one of these. */
    const char *schedules[] = {"ring", "ring-pipelined", "rhd", "rd", "naive"};
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    for (size_t a = 0; a < sizeof schedules / sizeof *schedules; a++) {
        dp_comm c;
        open_comm(&c, schedules[a]);
        c.segment_bytes = SEGMENT_BYTES;
        for (int k = 0; k < COUNT_CASES; k++) {
            float *allreduce, *composed;
            allreduce_and_composition(&c, counts[k], &allreduce, &composed);
            ck_assert_msg(all_ok(memcmp(allreduce, composed, counts[k] * sizeof(float)) == 0),
                          "%s W=%d count %zu: all-reduce differs from reduce-scatter + all-gather",
                          schedules[a], world_size, counts[k]);
            free(allreduce);
            free(composed);
        }
        dp_comm_free(&c);
    }
}
END_TEST

/* Bucket boundaries of a parent buffer: uneven, one bucket smaller than W, one empty. */
enum { BUCKETS = 5 };

static void bucket_bounds(size_t total, size_t bounds[BUCKETS + 1])
{
    const size_t cut[BUCKETS + 1] = {0, total / 3, total / 3 + 1, total / 3 + 1, total - total / 5, total};
    for (int b = 0; b <= BUCKETS; b++) /* small totals: kept in order and inside the buffer */
        bounds[b] = cut[b] > total ? total : b && cut[b] < bounds[b - 1] ? bounds[b - 1] : cut[b];
}

/* Each bucket of buf as its own request with the parent's blocks, all in flight together. */
static void run_buckets(dp_comm *c, dp_collective kind, float *buf, size_t total)
{
    size_t bounds[BUCKETS + 1];
    bucket_bounds(total, bounds);
    dp_request *requests[BUCKETS];
    for (int b = 0; b < BUCKETS; b++) {
        dp_request_args a = {.kind = kind, .buf = buf + bounds[b], .count = bounds[b + 1] - bounds[b],
                             .label = "a bucket", .parent_count = total, .parent_offset = bounds[b]};
        ck_assert_msg(dp_comm_start(c, &a, &requests[b]) == 0, "%s", dp_last_error());
    }
    ck_assert(all_ok(dp_comm_wait_all(c) == 0));
}

/* Bucketed reduce-scatter leaves each rank its shard of the whole buffer, as MPI sums it
 * (ZeRO-2); bucketed all-gather then completes the buffer; with the ring, bucketed
 * all-reduces are bitwise the whole buffer's. */
static void buckets_of_a_parent(dp_comm *c, const char *name)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    for (int k = 0; k < COUNT_CASES; k++) {
        size_t total = counts[k];
        float *buf = exact_input(total), *expected = mpi_sum(buf, total, 0);
        dp_range shard = dp_partition(total, world_size, world_rank);
        run_buckets(c, DP_REDUCE_SCATTER, buf, total);
        ck_assert_msg(all_ok(memcmp(buf + shard.begin, expected + shard.begin, dp_range_size(shard) * sizeof(float)) == 0),
                      "%s W=%d count %zu: bucketed reduce-scatter did not leave this rank its shard", name,
                      world_size, total);
        run_buckets(c, DP_ALLGATHER, buf, total);
        ck_assert_msg(all_ok(memcmp(buf, expected, total * sizeof(float)) == 0 && guard_intact(buf, total)),
                      "%s W=%d count %zu: bucketed all-gather did not complete the buffer", name, world_size, total);
        free(buf);
        free(expected);
        if (strcmp(name, "ring") != 0)
            continue;
        float *input = random_input(total), *bucketed = copy_of(input, total);
        run_buckets(c, DP_ALLREDUCE, bucketed, total);
        ck_assert(all_ok(dp_comm_allreduce_sum(c, input, total) == 0));
        ck_assert_msg(all_ok(memcmp(bucketed, input, total * sizeof(float)) == 0),
                      "ring W=%d count %zu: bucketed all-reduce differs from the whole buffer's", world_size, total);
        free(input);
        free(bucketed);
    }
}

START_TEST(buckets_of_a_parent_buffer_reduce_to_its_shards)
{
    for_every_algorithm(buckets_of_a_parent);
}
END_TEST

/* After dp_comm_reserve, 8 requests of every kind up to the reserved count allocate nothing. */
static void reserved(dp_comm *c, const char *name)
{
    const size_t largest = (size_t)1 << 16;
    ck_assert(all_ok(dp_comm_reserve(c, largest, MAX_IN_FLIGHT, 0) == 0));
    long before = dp_comm_allocations(c);
    for (int round = 0; round < 2; round++) {
        job jobs[MAX_IN_FLIGHT];
        for (int k = 0; k < MAX_IN_FLIGHT; k++) {
            prepare_exact(&jobs[k], (dp_collective)(k % DP_COLLECTIVE_KINDS), largest - (size_t)k * 1001);
            start_job(c, &jobs[k]);
        }
        wait_in_rank_order(jobs, MAX_IN_FLIGHT);
        for (int k = 0; k < MAX_IN_FLIGHT; k++) {
            ck_assert(all_ok(job_ok(&jobs[k])));
            release(&jobs[k]);
        }
    }
    ck_assert_msg(dp_comm_allocations(c) == before, "%s: %ld allocations after reserve", name,
                  dp_comm_allocations(c) - before);
}

START_TEST(reserved_slots_make_requests_allocate_nothing)
{
    for_every_algorithm(reserved);
}
END_TEST

/* With a progress thread, requests complete while this thread never calls into a progressing
 * dp_comm function (dp_comm_outstanding only looks): without it, this would spin until the
 * script's timeout. */
static void thread_progresses(dp_comm *c, const char *name)
{
    ck_assert_msg(dp_comm_start_progress_thread(c, 100) == 0, "%s", dp_last_error());
    ck_assert_int_eq(dp_comm_start_progress_thread(c, 100), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "already running"));
    job jobs[DP_COLLECTIVE_KINDS];
    for (int k = 0; k < DP_COLLECTIVE_KINDS; k++) {
        prepare_exact(&jobs[k], (dp_collective)k, 1000003);
        start_job(c, &jobs[k]);
    }
    while (dp_comm_outstanding(c))
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    dp_comm_stop_progress_thread(c);
    ck_assert(dp_comm_wait_all(c) == 0);
    for (int k = 0; k < DP_COLLECTIVE_KINDS; k++) {
        ck_assert_msg(all_ok(job_ok(&jobs[k])), "%s W=%d: %s progressed by the thread is wrong", name,
                      world_size, kind_names[k]);
        release(&jobs[k]);
    }
    ck_assert_int_eq(dp_comm_start_progress_thread(c, -1), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "interval -1 us: must be 0 to 999999"));
}

START_TEST(a_progress_thread_completes_requests_while_the_caller_computes)
{
    for_every_algorithm(thread_progresses);
}
END_TEST

START_TEST(bytes_sent_are_counted_per_kind)
{
    const size_t count = 1000003;
    float *buf = exact_input(count);
    dp_comm c;
    open_comm(&c, "ring");
    dp_range mine = dp_partition(count, world_size, world_rank);
    dp_range right = dp_partition(count, world_size, (world_rank + 1) % world_size);
    ck_assert(all_ok(dp_comm_allreduce_sum(&c, buf, count) == 0));
    ck_assert(all_ok(dp_reduce_scatter_ring(&c, buf, count) == 0 && dp_allgather_ring(&c, buf, count) == 0));
    /* The ring's reduce-scatter sends every block but this rank's; its all-gather every
     * block but the right neighbour's: together 2 (W-1) buffers over all ranks. */
    uint64_t reduce_scatter = (count - dp_range_size(mine)) * sizeof(float);
    uint64_t allgather = (count - dp_range_size(right)) * sizeof(float);
    ck_assert_uint_eq(c.traffic.bytes[DP_REDUCE_SCATTER], reduce_scatter);
    ck_assert_uint_eq(c.traffic.bytes[DP_ALLGATHER], allgather);
    ck_assert_uint_eq(c.traffic.bytes[DP_ALLREDUCE], reduce_scatter + allgather);
    uint64_t everyone = 0, mine_all = c.traffic.bytes[DP_ALLREDUCE];
    MPI_Allreduce(&mine_all, &everyone, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    ck_assert_uint_eq(everyone, 2 * (uint64_t)(world_size - 1) * count * sizeof(float));
    ck_assert_uint_eq(c.traffic.modelled[DP_ALLREDUCE], 0);
    ck_assert_uint_eq(c.traffic.requests[DP_ALLREDUCE], 1);
    /* mpi's own collective: counted as the ring's volume, and marked so. */
    ck_assert_int_eq(dp_comm_set_algorithm(&c, "mpi"), 0);
    ck_assert(all_ok(dp_comm_allreduce_sum(&c, buf, count) == 0));
    ck_assert_uint_eq(c.traffic.bytes[DP_ALLREDUCE], 2 * (reduce_scatter + allgather));
    ck_assert_uint_eq(c.traffic.modelled[DP_ALLREDUCE], reduce_scatter + allgather);
    ck_assert_uint_eq(c.traffic.requests[DP_ALLREDUCE], 2);
    dp_comm_free(&c);
    free(buf);
}
END_TEST

START_TEST(bad_requests_are_refused_naming_the_problem)
{
    dp_comm c;
    open_comm(&c, "ring");
    float buf[8];
    dp_request *q = NULL;
    dp_request_args a = {.kind = DP_COLLECTIVE_KINDS, .buf = buf, .count = 8};
    ck_assert_int_eq(dp_comm_start(&c, &a, &q), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "collective kind 3"));
    a = (dp_request_args){.kind = DP_ALLGATHER, .buf = buf, .count = 8, .parent_count = 10, .parent_offset = 3};
    ck_assert_int_eq(dp_comm_start(&c, &a, &q), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "all-gather of [3, 3 + 8): outside its parent buffer of 10"));
    ck_assert_ptr_null(q);
    ck_assert_int_eq(dp_comm_outstanding(&c), 0);
    /* Switching algorithm or reserving under a running request would pull its memory away.
     * Rank 0 starts first, while the others wait at a barrier: its ring cannot complete. */
    if (world_rank == 0)
        ck_assert_int_eq(dp_comm_start_allreduce(&c, buf, 8, "bucket 0", &q), 0);
    if (world_rank == 0 && world_size > 1) {
        ck_assert_int_eq(dp_comm_outstanding(&c), 1);
        ck_assert_int_eq(dp_comm_set_algorithm(&c, "rhd"), DP_EINVAL);
        ck_assert_ptr_nonnull(strstr(dp_last_error(), "cannot switch to algorithm 'rhd' with 1 request(s) outstanding"));
        ck_assert_int_eq(dp_comm_reserve(&c, 8, 1, 0), DP_EINVAL);
        ck_assert_ptr_nonnull(strstr(dp_last_error(), "dp_comm_reserve with 1 request(s) outstanding"));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank != 0)
        ck_assert_int_eq(dp_comm_start_allreduce(&c, buf, 8, "bucket 0", &q), 0);
    ck_assert(all_ok(dp_comm_wait_all(&c) == 0));
    dp_comm_free(&c);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Suite *s = suite_create("requests");
    TCase *tc = tcase_create("against-mpi");
    tcase_add_test(tc, every_algorithm_matches_mpi_with_1_2_and_8_requests_in_flight);
    tcase_add_test(tc, requests_in_flight_round_as_they_do_alone);
    tcase_add_test(tc, interleaved_starts_and_waits_in_any_order_never_deadlock);
    tcase_add_test(tc, allreduce_is_reduce_scatter_then_allgather_bit_for_bit);
    tcase_add_test(tc, buckets_of_a_parent_buffer_reduce_to_its_shards);
    tcase_add_test(tc, reserved_slots_make_requests_allocate_nothing);
    tcase_add_test(tc, a_progress_thread_completes_requests_while_the_caller_computes);
    tcase_add_test(tc, bytes_sent_are_counted_per_kind);
    tcase_add_test(tc, bad_requests_are_refused_naming_the_problem);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
