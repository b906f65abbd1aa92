/* Multi-rank: run under mpirun for W = 1, 3, 4, 5 (tests/hier-wN.sh). Rank groups and
 * --allreduce hier with every inner algorithm on node layouts simulated on one machine
 * (dp_comm.node): one node, a node per rank, pairs, one rank beside all others, nodes of
 * every other rank, three nodes of different sizes. Against MPI's own collectives on the
 * awkward counts, three requests in flight waited for in rank-dependent orders; rounded
 * inputs bitwise the same on every rank and in every run; reserve; refused inner names.
 * tests/multihost/check-multihost.sh runs hier across real namespace hosts. A deadlock fails
 * through the script's timeout. */
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/options.h"
#include "dp/partition.h"
#include "dp/train.h"
#include "tests/collective_data.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[DP_COLLECTIVE_KINDS] = {"all-reduce", "reduce-scatter", "all-gather"};
static const char *const inners[] = {"ring", "rhd", "mpi", "ring-pipelined"};
enum { INNERS = sizeof inners / sizeof inners[0], LAYOUTS = 6, SEGMENT_BYTES = 64 * 1024 };

/* Rank r's node in layout l; -1: the real one (every rank of this machine). */
static int node_of(int layout, int r)
{
    switch (layout) {
    case 0: return -1;                              /* the real nodes (shared memory) */
    case 1: return r;                               /* a node per rank */
    case 2: return r / 2;                           /* pairs (the last alone for odd W) */
    case 3: return r == 0 ? 0 : 1;                  /* 1 + (W-1) */
    case 4: return r % 2;                           /* interleaved: map-by node */
    default: return r < 3 ? 0 : r < 4 ? 1 : 2;      /* 3 + 1 + (W-4) */
    }
}

static const char *const layout_names[LAYOUTS] = {"the real nodes", "a node per rank", "pairs", "1 + (W-1)",
                                                  "every other rank", "3 + 1 + rest"};

static void open_hier(dp_comm *c, int layout, const char *inner)
{
    open_comm(c, "hier");
    c->node = node_of(layout, world_rank);
    c->segment_bytes = SEGMENT_BYTES;
    ck_assert_msg(dp_comm_set_hier_inner(c, inner) == 0, "%s", dp_last_error());
}

/* Ranks in r's node and nodes in the layout, counted from node_of. */
static void layout_shape(int layout, int *node_ranks, int *nodes, int *lowest)
{
    int mine = node_of(layout, world_rank);
    *node_ranks = *nodes = 0;
    *lowest = world_size;
    for (int r = 0; r < world_size; r++) {
        int seen_before = 0;
        for (int s = 0; s < r; s++)
            seen_before |= node_of(layout, s) == node_of(layout, r);
        *nodes += !seen_before;
        if (node_of(layout, r) == mine) {
            (*node_ranks)++;
            *lowest = r < *lowest ? r : *lowest;
        }
    }
}

START_TEST(groups_split_the_ranks_by_node)
{
    for (int layout = 1; layout < LAYOUTS; layout++) {
        dp_comm c;
        open_comm(&c, "ring");
        c.node = node_of(layout, world_rank);
        int node_ranks, nodes, lowest, size = 0;
        layout_shape(layout, &node_ranks, &nodes, &lowest);
        MPI_Comm g[DP_GROUP_KINDS];
        for (int k = 0; k < DP_GROUP_KINDS; k++)
            ck_assert_msg(dp_comm_split_group(&c, (dp_group)k, &g[k]) == 0, "%s", dp_last_error());
        MPI_Comm_size(g[DP_GROUP_WORLD], &size);
        int ok = size == world_size;
        MPI_Comm_size(g[DP_GROUP_NODE], &size);
        ok &= size == node_ranks;
        ok &= (g[DP_GROUP_LEADERS] != MPI_COMM_NULL) == (lowest == world_rank);
        if (g[DP_GROUP_LEADERS] != MPI_COMM_NULL) {
            MPI_Comm_size(g[DP_GROUP_LEADERS], &size);
            ok &= size == nodes;
        }
        ck_assert_msg(all_ok(ok), "layout '%s' W=%d: groups of the wrong sizes", layout_names[layout], world_size);
        for (int k = 0; k < DP_GROUP_KINDS; k++)
            if (g[k] != MPI_COMM_NULL)
                MPI_Comm_free(&g[k]);
        dp_comm_free(&c);
    }
    dp_group group;
    ck_assert_int_eq(dp_group_parse("leaders", &group), 0);
    ck_assert_int_eq(group, DP_GROUP_LEADERS);
    ck_assert_int_eq(dp_group_parse("rack", &group), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "group 'rack': unknown (valid: world node leaders)"));
}
END_TEST

/* Exact input of kind for count, and where the result must equal MPI's. */
static float *exact_job(dp_collective kind, size_t count, float **expected, dp_range *checked)
{
    dp_range mine = dp_partition(count, world_size, world_rank);
    *checked = kind == DP_REDUCE_SCATTER ? mine : whole(count);
    if (kind != DP_ALLGATHER) {
        float *buf = exact_input(count);
        *expected = mpi_sum(buf, count, 0);
        return buf;
    }
    float *buf = guarded(count);
    *expected = guarded(count);
    for (int owner = 0; owner < world_size; owner++) {
        dp_range block = dp_partition(count, world_size, owner);
        for (size_t i = block.begin; i < block.end; i++)
            (*expected)[i] = owned_value(owner, i);
    }
    for (size_t i = 0; i < count; i++)
        buf[i] = i >= mine.begin && i < mine.end ? (*expected)[i] : 7.0f;
    return buf;
}

/* The three kinds of every count in flight together, waited for in a rank-dependent order. */
static void check_exact(dp_comm *c, const char *what)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    for (int k = 0; k < COUNT_CASES; k++) {
        float *buf[DP_COLLECTIVE_KINDS], *expected[DP_COLLECTIVE_KINDS];
        dp_range checked[DP_COLLECTIVE_KINDS];
        dp_request *q[DP_COLLECTIVE_KINDS];
        for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++) {
            buf[kind] = exact_job((dp_collective)kind, counts[k], &expected[kind], &checked[kind]);
            dp_request_args a = {.kind = (dp_collective)kind, .buf = buf[kind], .count = counts[k]};
            ck_assert_msg(dp_comm_start(c, &a, &q[kind]) == 0, "%s", dp_last_error());
        }
        for (int i = 0; i < DP_COLLECTIVE_KINDS; i++) {
            int kind = (i + world_rank) % DP_COLLECTIVE_KINDS;
            ck_assert_msg(dp_request_wait(&q[kind]) == 0, "%s", dp_last_error());
        }
        for (int kind = 0; kind < DP_COLLECTIVE_KINDS; kind++) {
            size_t n = dp_range_size(checked[kind]);
            int ok = memcmp(buf[kind] + checked[kind].begin, expected[kind] + checked[kind].begin,
                            n * sizeof(float)) == 0 && guard_intact(buf[kind], counts[k]);
            ck_assert_msg(all_ok(ok), "%s W=%d: %s of %zu differs from MPI's", what, world_size,
                          kind_names[kind], counts[k]);
            free(buf[kind]);
            free(expected[kind]);
        }
    }
}

/* Rounded inputs: within rounding of MPI_Allreduce, the same bits on every rank and twice. */
static void check_rounded(dp_comm *c, const char *what)
{
    size_t counts[COUNT_CASES];
    counts_for_world(counts);
    for (int k = 0; k < COUNT_CASES; k++) {
        size_t n = counts[k];
        float *input = random_input(n), *first = copy_of(input, n), *second = copy_of(input, n);
        float *expected = mpi_sum(input, n, 0), *abs_sum = mpi_sum(input, n, 1);
        ck_assert(all_ok(dp_comm_allreduce_sum(c, first, n) == 0 && dp_comm_allreduce_sum(c, second, n) == 0));
        ck_assert_msg(all_ok(close_to(first, expected, abs_sum, whole(n))),
                      "%s W=%d count %zu: further from MPI_Allreduce than rounding allows", what, world_size, n);
        ck_assert_msg(dp_test_same_on_every_rank(first, n * sizeof(float)), "%s W=%d count %zu: ranks differ",
                      what, world_size, n);
        ck_assert_msg(all_ok(memcmp(first, second, n * sizeof(float)) == 0), "%s W=%d count %zu: runs differ",
                      what, world_size, n);
        free(input);
        free(first);
        free(second);
        free(expected);
        free(abs_sum);
    }
}

/* Every inner algorithm over the layouts [first, last]. */
static void check_layouts(int first, int last)
{
    for (int layout = first; layout <= last; layout++)
        for (int i = 0; i < INNERS; i++) {
            char what[128];
            snprintf(what, sizeof what, "hier over '%s' with inner %s", layout_names[layout], inners[i]);
            dp_comm c;
            open_hier(&c, layout, inners[i]);
            check_exact(&c, what);
            check_rounded(&c, what);
            dp_comm_free(&c);
        }
}

START_TEST(hier_matches_mpi_on_the_real_nodes_with_every_inner_algorithm)
{
    check_layouts(0, 0);
}
END_TEST

START_TEST(hier_matches_mpi_on_every_simulated_layout_and_inner_algorithm)
{
    check_layouts(1, LAYOUTS - 1);
}
END_TEST

/* After dp_comm_reserve the groups' slots are there: requests allocate nothing. */
START_TEST(reserved_hier_requests_allocate_nothing)
{
    const size_t largest = (size_t)1 << 20; /* counts_for_world's largest */
    for (int layout = 1; layout < LAYOUTS; layout++) {
        dp_comm c;
        open_hier(&c, layout, "ring");
        ck_assert(all_ok(dp_comm_reserve(&c, largest, DP_COLLECTIVE_KINDS, 0) == 0));
        long before = dp_comm_allocations(&c);
        ck_assert_int_gt(before, 0);
        check_exact(&c, "reserved hier");
        ck_assert_msg(all_ok(dp_comm_allocations(&c) == before), "layout '%s': %ld allocations after reserve",
                      layout_names[layout], dp_comm_allocations(&c) - before);
        dp_comm_free(&c);
    }
}
END_TEST

START_TEST(hier_inner_refuses_itself_and_unknown_names)
{
    dp_comm c;
    open_comm(&c, "hier");
    ck_assert_int_eq(dp_comm_set_hier_inner(&c, "hier"), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--hier-inner 'hier': cannot run among the nodes' leaders"));
    ck_assert_int_eq(dp_comm_set_hier_inner(&c, "tree"), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--hier-inner 'tree': unknown algorithm (valid: "));
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "rhd"));
    dp_comm_free(&c);
}
END_TEST

/* Trains o's 20 steps on comm's ranks with hier over the layout (layout -1: one rank, not hier). */
static float *train(const dp_options *o, const dp_dataset *data, int layout, const char *inner, size_t *n)
{
    dp_comm c;
    if (layout < 0)
        ck_assert_msg(dp_comm_init(&c, MPI_COMM_SELF, "ring") == 0, "%s", dp_last_error());
    else
        open_hier(&c, layout, inner);
    dp_train_result result;
    ck_assert_msg(dp_train(o, data, NULL, &c, &result, 1) == 0, "%s", dp_last_error());
    dp_comm_free(&c);
    *n = dp_test_param_count(o, data->dim);
    return result.params;
}

/* THE EQUIVALENCE TEST for hier: W ranks over the layouts [first, last] with every inner
 * algorithm train like one rank (relative error <= 1e-5), every replica bitwise the same. */
static void check_training(int first, int last)
{
    dp_options o;
    dp_options_defaults(&o);
    o.device = DP_DEVICE_CPU;
    strcpy(o.layers_spec, "20,32,16,5");
    ck_assert_int_eq(dp_model_spec_from_layers(o.layers_spec, &o.model), 0);
    o.steps = 20;
    o.batch = 67; /* uneven slices for every W here */
    o.lr = 0.1f;
    o.quiet = 1;
    dp_dataset data;
    ck_assert_msg(dp_dataset_open("synthetic:500,20,5", 0, 0, 77, &data) == 0, "%s", dp_last_error());
    size_t n = 0;
    float *single = world_rank == 0 ? train(&o, &data, -1, NULL, &n) : NULL;
    for (int layout = first; layout <= last; layout++)
        for (int i = 0; i < INNERS; i++) {
            float *params = train(&o, &data, layout, inners[i], &n);
            ck_assert_msg(dp_test_same_on_every_rank(params, n * sizeof(float)), "hier '%s' inner %s: replicas differ",
                          layout_names[layout], inners[i]);
            double error = world_rank == 0 ? dp_test_relative_error(params, single, n) : 0.0;
            ck_assert_msg(all_ok(error <= 1e-5), "hier over '%s' with inner %s W=%d: relative error %g vs 1 rank",
                          layout_names[layout], inners[i], world_size, error);
            free(params);
        }
    free(single);
    dp_dataset_free(&data);
}

START_TEST(hier_trains_like_one_rank_on_the_real_nodes)
{
    check_training(0, 0);
}
END_TEST

START_TEST(hier_trains_like_one_rank_on_every_simulated_layout)
{
    check_training(1, LAYOUTS - 1);
}
END_TEST

/* Case "real-nodes" alone (CK_RUN_CASE) is what tests/multihost/check-hier.sh runs across hosts. */
int main(int argc, char **argv)
{
    dp_test_mpi_init(&argc, &argv, &world_rank, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Suite *s = suite_create("hier");
    TCase *real = tcase_create("real-nodes"), *simulated = tcase_create("simulated-nodes");
    tcase_set_timeout(real, 0);
    tcase_set_timeout(simulated, 0);
    tcase_add_test(real, hier_matches_mpi_on_the_real_nodes_with_every_inner_algorithm);
    tcase_add_test(real, hier_trains_like_one_rank_on_the_real_nodes);
    tcase_add_test(simulated, groups_split_the_ranks_by_node);
    tcase_add_test(simulated, hier_matches_mpi_on_every_simulated_layout_and_inner_algorithm);
    tcase_add_test(simulated, reserved_hier_requests_allocate_nothing);
    tcase_add_test(simulated, hier_inner_refuses_itself_and_unknown_names);
    tcase_add_test(simulated, hier_trains_like_one_rank_on_every_simulated_layout);
    suite_add_tcase(s, real);
    suite_add_tcase(s, simulated);
    int failed_anywhere = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed_anywhere ? EXIT_FAILURE : EXIT_SUCCESS;
}
