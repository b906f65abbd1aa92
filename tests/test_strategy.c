/* Multi-rank: run under mpirun (tests/strategy-wN.sh). A strategy driven through the hooks it
 * attaches, as the engine drives them, without a model: the gradients' sum against
 * MPI_Allreduce for DDP and ZeRO-1 (this rank's shard), a bucket hook that averages instead of
 * summing, and a hook's error ending the step with its status. A deadlock fails through the
 * script's timeout. */
#include "dp/error.h"
#include "dp/strategy.h"
#include "tests/collective_data.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

/* Segments of 300, 1000 and 50 floats; buckets of at most 100, then 400 floats. */
static const size_t offsets[] = {0, 300, 1300}, counts[] = {300, 1000, 50};
static const dp_strategy_layout layout = {.segments = 3, .offset = offsets, .count = counts, .total = 1350};
#define MIB_FLOATS (1048576.0 / sizeof(float))
/* Backward reports pieces of at most this many floats, as a Linear's row blocks would be. */
#define PIECE 64

typedef struct rig {
    dp_comm comm;
    dp_strategy *strategy;
    dp_step_hooks hooks;
    float *weights, *grads;
} rig;

static void open_rig(rig *r, const char *name)
{
    open_comm(&r->comm, "ring");
    r->weights = calloc(layout.total, sizeof(float));
    r->grads = exact_input(layout.total);
    dp_strategy_buffers buffers = {.comm_grads = r->grads, .be = dp_backend_cpu(), .weights = r->weights,
                                   .grads = r->grads};
    dp_strategy_choice choice;
    ck_assert_int_eq(dp_strategy_choose(&choice, name, "the test"), 0);
    dp_strategy_config config = dp_strategy_default_config(&choice, 1, 400.0 / MIB_FLOATS, layout.total);
    config.first_bucket_mb = 100.0 / MIB_FLOATS;
    ck_assert_int_eq(dp_strategy_open(&r->strategy, &r->comm, &layout, &buffers, &config), 0);
    dp_strategy_attach(r->strategy, &r->hooks);
}

static void close_rig(rig *r)
{
    dp_strategy_close(r->strategy);
    dp_comm_free(&r->comm);
    free(r->weights);
    free(r->grads);
}

/* One micro-batch's backward as the engine runs it: before each segment's module (the last
 * first), its gradient final piece by piece from its end, then finish. Returns finish's status
 * or the first hook error. */
static int backward(rig *r)
{
    int status = 0;
    for (int s = layout.segments - 1; !status && s >= 0; s--) {
        dp_pass pass = {.module = s, .segment = s, .backward = 1, .first = s == layout.segments - 1,
                        .communicates = 1};
        float *weights, *grads;
        status = r->hooks.before(r->hooks.arg, &pass, &weights, &grads);
        for (size_t end = offsets[s] + counts[s]; !status && end > offsets[s];) {
            size_t begin = end - offsets[s] > PIECE ? end - PIECE : offsets[s];
            status = r->hooks.grad_ready(r->hooks.arg, begin, end - begin);
            end = begin;
        }
    }
    return status ? status : r->hooks.finish(r->hooks.arg);
}

/* The range this rank must hold summed: all of it, or its shard. */
static dp_range summed_range(const rig *r)
{
    size_t begin, end;
    dp_strategy_shard(r->strategy, &begin, &end);
    return (dp_range){begin, end};
}

START_TEST(hooks_sum_the_gradients_as_mpi_allreduce_does)
{
    static const char *const names[] = {"ddp", "zero-1"};
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        rig r;
        open_rig(&r, names[n]);
        float *expected = mpi_sum(r.grads, layout.total, 0);
        ck_assert(all_ok(backward(&r) == 0));
        dp_range mine = summed_range(&r);
        int same = memcmp(r.grads + mine.begin, expected + mine.begin, dp_range_size(mine) * sizeof(float)) == 0;
        ck_assert_msg(all_ok(same), "%s: the summed gradients differ from MPI_Allreduce's", names[n]);
        free(expected);
        close_rig(&r);
    }
}
END_TEST

/* A comm hook in PyTorch's sense: it starts the strategy's collective itself, counting, and
 * turns the sum into the mean when it completes. */
typedef struct averaging {
    int starts, dones, world;
    int refuse_start;     /* > 0: that start fails (the same one on every rank), ending the step */
} averaging;

static int start_counted(void *arg, dp_comm *comm, const dp_request_args *args, dp_request **request)
{
    averaging *a = arg;
    if (++a->starts == a->refuse_start)
        return dp_fail(DP_EINVAL, "bucket hook refused %s", args->label);
    return dp_comm_start(comm, args, request);
}

static int divide_by_world(void *arg, const dp_request_args *args)
{
    averaging *a = arg;
    a->dones++;
    float *data = args->buf;
    for (size_t i = 0; i < args->count; i++)
        data[i] /= (float)a->world;
    return 0;
}

START_TEST(a_bucket_hook_can_average_instead_of_sum)
{
    rig r;
    open_rig(&r, "ddp");
    averaging a = {.world = world_size};
    dp_bucket_hook hook = {.start = start_counted, .done = divide_by_world, .arg = &a};
    dp_strategy_set_bucket_hook(r.strategy, &hook);
    float *expected = mpi_sum(r.grads, layout.total, 0);
    for (size_t i = 0; i < layout.total; i++)
        expected[i] /= (float)world_size;
    ck_assert(all_ok(backward(&r) == 0));
    int buckets = world_size > 1 ? dp_strategy_bucket_count(r.strategy) : 0; /* one rank: nothing to reduce */
    ck_assert_int_eq(a.starts, buckets);
    ck_assert_int_eq(a.dones, buckets);
    if (world_size > 1)
        ck_assert(all_ok(memcmp(r.grads, expected, layout.total * sizeof(float)) == 0));
    free(expected);
    close_rig(&r);
}
END_TEST

START_TEST(a_hook_error_ends_the_step_with_its_status)
{
    if (world_size == 1)
        return; /* one rank starts no collective */
    rig r;
    open_rig(&r, "ddp");
    averaging a = {.world = world_size, .refuse_start = 2};
    dp_bucket_hook hook = {.start = start_counted, .done = divide_by_world, .arg = &a};
    dp_strategy_set_bucket_hook(r.strategy, &hook);
    int status = backward(&r);
    ck_assert_int_eq(status, DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "bucket hook refused bucket 1"));
    ck_assert_int_eq(a.starts, 2);
    /* The bucket still in flight must finish before the comm layer can be freed. */
    ck_assert_int_eq(dp_comm_wait_all(&r.comm), 0);
    close_rig(&r);
}
END_TEST

int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Suite *s = suite_create("strategy");
    TCase *tc = tcase_create("hooks");
    tcase_add_test(tc, hooks_sum_the_gradients_as_mpi_allreduce_does);
    tcase_add_test(tc, a_bucket_hook_can_average_instead_of_sum);
    tcase_add_test(tc, a_hook_error_ends_the_step_with_its_status);
    suite_add_tcase(s, tc);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
