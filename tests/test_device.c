/* Choosing the device, on any machine: backend selection and GPU binding rules (the plan that
 * gives a node's ranks distinct GPUs by UUID, whatever each rank sees), the --device, --tf32,
 * --share-gpu and --cuda-aware options, which memory each all-reduce algorithm is handed, and
 * the CPU backend's context and dtypes. tests/test_gpu.c covers the GPU itself. Run under mpirun
 * with one rank (tests/device.sh; tests/fakecuda.sh runs it again with one fake GPU visible,
 * and tests/fakecuda-binding.sh the binding through dp_worker on two ranks). */
#include "config.h"

#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/data.h"
#include "dp/error.h"
#include "dp/options.h"
#include "dp/train.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dp_backend_request request_for(dp_device device, int local_size, int share_gpu)
{
    return (dp_backend_request){.device = device, .share_gpu = share_gpu, .rank = 0,
                                .local_rank = 0, .local_size = local_size};
}

START_TEST(cpu_backend_takes_float32_and_declines_bf16)
{
    const dp_backend *be = NULL;
    dp_backend_request request = request_for(DP_DEVICE_CPU, 1, 0);
    ck_assert_int_eq(dp_backend_open(&request, &be), 0);
    ck_assert_int_eq(be->host_memory, 1);
    ck_assert_ptr_null(be->stream);
    ck_assert_ptr_nonnull(strstr(be->describe(be), "cpu"));
    ck_assert_int_eq(dp_backend_require(be, "gemm", DP_DTYPE_F32), 0);
    ck_assert_int_eq(dp_backend_require(be, "gemm", DP_DTYPE_BF16), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "cpu backend cannot run gemm in BF16") != NULL, "%s", dp_last_error());
    dp_backend_close(be);
}
END_TEST

/* A node table: rank r sees the GPUs named by the letters of lists[r] ("" for none). */
typedef struct node {
    dp_gpu_id visible[8 * DP_MAX_VISIBLE_GPUS];
    int counts[8];
} node;

static void fill_node(node *n, const char *const *lists, int ranks)
{
    memset(n, 0, sizeof *n);
    for (int r = 0; r < ranks; r++) {
        n->counts[r] = (int)strlen(lists[r]);
        for (int i = 0; i < n->counts[r]; i++)
            n->visible[r * DP_MAX_VISIBLE_GPUS + i].uuid[0] = (unsigned char)lists[r][i];
    }
}

/* Plans the node and returns each rank's choice as the letter of the GPU it binds. */
static void plan_node(const char *const *lists, int ranks, char *letters, int *own, char *text, size_t text_size)
{
    node n;
    fill_node(&n, lists, ranks);
    for (int r = 0; r < ranks; r++) {
        dp_gpu_binding b;
        ck_assert_int_eq(dp_backend_plan_binding(n.visible, n.counts, ranks, r, &b), 0);
        ck_assert_int_eq(b.gpus_visible, n.counts[r]);
        letters[r] = n.counts[r] ? (char)n.visible[r * DP_MAX_VISIBLE_GPUS + b.gpu].uuid[0] : '-';
        *own = b.own_gpu;
        snprintf(text, text_size, "%s", b.text);
    }
    letters[ranks] = 0;
}

START_TEST(binding_gives_each_rank_its_own_gpu_by_identity)
{
    static const struct {
        const char *lists[8];
        int ranks, own;
        const char *want;
    } cases[] = {
        {{"A", "B", "C", "D"}, 4, 1, "ABCD"},           /* srun --gpus-per-task=1: each sees "GPU 0" */
        {{"ABCD", "ABCD", "ABCD", "ABCD"}, 4, 1, "ABCD"}, /* all see all: local rank r takes GPU r */
        {{"DCBA", "DCBA", "DCBA", "DCBA"}, 4, 1, "DCBA"}, /* CUDA_VISIBLE_DEVICES=3,2,1,0 */
        {{"AB", "A"}, 2, 1, "BA"},                       /* rank 0 must move for rank 1 */
        {{"A", "A"}, 2, 0, "AA"},                        /* two ranks, one GPU: shared */
        {{"AB", "AB", "AB"}, 3, 0, "ABA"},                /* more ranks than GPUs */
        {{"A", ""}, 2, 0, "A-"},                         /* a rank without a GPU */
        {{"AB", "BC", "CA"}, 3, 1, "ABC"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char letters[9], text[320];
        int own;
        plan_node(cases[i].lists, cases[i].ranks, letters, &own, text, sizeof text);
        ck_assert_msg(strcmp(letters, cases[i].want) == 0 && own == cases[i].own, "case %zu: %s (own %d), want %s (own %d)",
                      i, letters, own, cases[i].want, cases[i].own);
        ck_assert_ptr_nonnull(strstr(text, own ? "distinct GPUs" : "share"));
    }
    char letters[9], text[320];
    int own;
    const char *shared[] = {"A", "A"};
    plan_node(shared, 2, letters, &own, text, sizeof text);
    ck_assert_msg(strstr(text, "can reach only 1 distinct GPU") && strstr(text, "local rank 1: GPU-41000000"), "%s", text);
}
END_TEST

START_TEST(binding_text_lists_the_first_ranks)
{
    const char *lists[8] = {"ABCDEFGH", "ABCDEFGH", "ABCDEFGH", "ABCDEFGH", "ABCDEFGH", "ABCDEFGH", "ABCDEFGH", "ABCDEFGH"};
    char letters[9], text[320];
    int own;
    plan_node(lists, 8, letters, &own, text, sizeof text);
    ck_assert_str_eq(letters, "ABCDEFGH");
    ck_assert_msg(strstr(text, "this node's 8 ranks on 8 distinct GPUs (local rank 0: GPU-41000000") &&
                      strstr(text, "local rank 7: GPU-48000000)"), "%s", text);
}
END_TEST

START_TEST(auto_takes_cuda_only_when_every_local_rank_gets_a_gpu)
{
    int gpus = dp_backend_gpu_count();
    dp_backend_request one = request_for(DP_DEVICE_AUTO, 1, 0);
    dp_backend_request crowded = request_for(DP_DEVICE_AUTO, gpus + 1, 0);
    dp_backend_request shared = request_for(DP_DEVICE_AUTO, gpus + 1, 1);
    ck_assert_int_eq(dp_backend_cuda_usable(&one), gpus > 0);
    ck_assert_int_eq(dp_backend_cuda_usable(&crowded), 0);
    ck_assert_int_eq(dp_backend_cuda_usable(&shared), gpus > 0);
    const dp_backend *be = NULL;
    ck_assert_msg(dp_backend_open(&crowded, &be) == 0, "%s", dp_last_error());
    ck_assert_int_eq(be->host_memory, 1);
    ck_assert_msg(dp_backend_open(&one, &be) == 0, "%s", dp_last_error());
    ck_assert_int_eq(be->host_memory, gpus == 0);
    dp_backend_close(be);
}
END_TEST

START_TEST(cuda_fails_naming_the_missing_gpu_or_the_crowding)
{
    int gpus = dp_backend_gpu_count();
    const dp_backend *be = NULL;
    dp_backend_request request = request_for(DP_DEVICE_CUDA, gpus + 1, 0);
    int status = dp_backend_open(&request, &be);
    if (gpus == 0) {
        ck_assert_int_eq(status, DP_EDEVICE);
        ck_assert_msg(strstr(dp_last_error(), "no CUDA GPU") || strstr(dp_last_error(), "without the CUDA backend"),
                      "%s", dp_last_error());
        return;
    }
    ck_assert_int_eq(status, DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "--share-gpu"), "%s", dp_last_error());
    request.share_gpu = 1;
    ck_assert_msg(dp_backend_open(&request, &be) == 0, "%s", dp_last_error());
    /* Each open is a context of its own: its own stream, closed on its own. */
    const dp_backend *second = NULL;
    ck_assert_msg(dp_backend_open(&request, &second) == 0, "%s", dp_last_error());
    ck_assert_ptr_nonnull(be->stream);
    ck_assert_ptr_nonnull(second->stream);
    ck_assert_ptr_ne(be->stream, second->stream);
    dp_backend_close(second);
    dp_backend_close(be);
}
END_TEST

START_TEST(cuda_aware_follows_the_request_and_what_mpi_says)
{
    dp_comm c;
    ck_assert_int_eq(dp_comm_init(&c, MPI_COMM_WORLD, "mpi"), 0);
    int support = dp_mpi_cuda_support();
    ck_assert_int_eq(dp_comm_set_cuda_aware(&c, DP_CUDA_AWARE_OFF), 0);
    ck_assert_int_eq(c.cuda_aware, 0);
    ck_assert_int_eq(dp_comm_set_cuda_aware(&c, DP_CUDA_AWARE_AUTO), 0);
    ck_assert_int_eq(c.cuda_aware, support == 1);
    int status = dp_comm_set_cuda_aware(&c, DP_CUDA_AWARE_ON);
    if (support == 0) {
        ck_assert_int_eq(status, DP_EINVAL);
        ck_assert_ptr_nonnull(strstr(dp_last_error(), "MPIX_Query_cuda_support"));
    } else {
        ck_assert_int_eq(status, 0);
        ck_assert_int_eq(c.cuda_aware, 1);
    }
    dp_comm_free(&c);
}
END_TEST

START_TEST(gpu_memory_reaches_only_algorithms_that_take_it)
{
    dp_comm c;
    ck_assert_int_eq(dp_comm_init(&c, MPI_COMM_WORLD, "mpi"), 0);
    c.cuda_aware = 0;
    ck_assert_int_eq(dp_comm_wants_device_buffer(&c), 0);
    c.cuda_aware = 1;
    ck_assert_int_eq(dp_comm_wants_device_buffer(&c), 1);
    /* bf16 gradients are rounded and summed on the CPU: staged, however CUDA-aware MPI is. */
    dp_comm_set_grad_dtype(&c, DP_DTYPE_BF16);
    ck_assert_int_eq(dp_comm_wants_device_buffer(&c), 0);
    dp_comm_set_grad_dtype(&c, DP_DTYPE_F32);
    const char *host_adders[] = {"naive", "ring", "ring-pipelined", "rhd", "rd", "auto"};
    for (size_t i = 0; i < sizeof host_adders / sizeof *host_adders; i++) {
        ck_assert_int_eq(dp_comm_set_algorithm(&c, host_adders[i]), 0);
        ck_assert_msg(!dp_comm_wants_device_buffer(&c), "%s was handed GPU memory", host_adders[i]);
    }
#ifdef HAVE_NCCL
    ck_assert_str_eq(dp_comm_gpu_algorithm_names(), "nccl");
    ck_assert_int_eq(dp_comm_set_algorithm(&c, "nccl"), 0);
    c.cuda_aware = 0;
    ck_assert_int_eq(dp_comm_wants_device_buffer(&c), 1);
    dp_comm_set_grad_dtype(&c, DP_DTYPE_BF16); /* nccl rounds on the GPU */
    ck_assert_int_eq(dp_comm_wants_device_buffer(&c), 1);
#else
    ck_assert_str_eq(dp_comm_gpu_algorithm_names(), "");
    ck_assert_int_eq(dp_comm_set_algorithm(&c, "nccl"), DP_EINVAL);
#endif
    /* The host list (what dp_bench and the collective tests run) holds no GPU-only name. */
    ck_assert_ptr_null(strstr(dp_comm_algorithm_names(), "nccl"));
    dp_comm_free(&c);
}
END_TEST

static int parse(dp_options *o, const char *const *args, int count)
{
    char *argv[16];
    argv[0] = "dp_worker";
    for (int i = 0; i < count; i++)
        argv[i + 1] = (char *)args[i];
    return dp_options_parse(o, count + 1, argv, 1, NULL);
}

START_TEST(device_options_parse_and_reject_gpu_flags_on_the_cpu)
{
    dp_options o;
    ck_assert_int_eq(parse(&o, NULL, 0), 0);
    ck_assert_int_eq(o.device, DP_DEVICE_AUTO);
    ck_assert_int_eq(o.cuda_aware, DP_CUDA_AWARE_AUTO);
    ck_assert_int_eq(o.precision, DP_PRECISION_FP32);
    const char *gpu[] = {"--device", "cuda", "--tf32", "--share-gpu", "--cuda-aware", "off"};
    ck_assert_int_eq(parse(&o, gpu, 6), 0);
    ck_assert_int_eq(o.device, DP_DEVICE_CUDA);
    ck_assert_int_eq(o.precision, DP_PRECISION_TF32);
    ck_assert_int_eq(o.share_gpu, 1);
    ck_assert_int_eq(o.cuda_aware, DP_CUDA_AWARE_OFF);
    const char *bad_device[] = {"--device", "gpu"};
    ck_assert_int_eq(parse(&o, bad_device, 2), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "cpu, cuda, auto"));
    const char *tf32_on_cpu[] = {"--device", "cpu", "--tf32"};
    ck_assert_int_eq(parse(&o, tf32_on_cpu, 3), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--tf32 applies to GPUs"));
    const char *tf32_named[] = {"--device", "cpu", "--precision", "tf32"};
    ck_assert_int_eq(parse(&o, tf32_named, 4), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--precision tf32 applies to GPUs"));
    const char *both[] = {"--tf32", "--precision", "bf16"};
    ck_assert_int_eq(parse(&o, both, 3), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--tf32 is --precision tf32"));
    const char *alias[] = {"--precision", "tf32", "--tf32"};
    ck_assert_int_eq(parse(&o, alias, 3), 0);
    ck_assert_int_eq(o.precision, DP_PRECISION_TF32);
    const char *plan_only[] = {"--precision", "mixed"};
    ck_assert_int_eq(parse(&o, plan_only, 2), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "--precision mixed applies to --memory-plan, but --memory-plan is not given: training takes fp32, tf32 or bf16"),
                  "%s", dp_last_error());
    const char *aware_on_cpu[] = {"--cuda-aware", "on", "--device", "cpu"};
    ck_assert_int_eq(parse(&o, aware_on_cpu, 4), DP_EINVAL);
    ck_assert_ptr_nonnull(strstr(dp_last_error(), "--cuda-aware on"));
}
END_TEST

/* dp_train's status for a one-step run on a tiny dataset with args (which must parse); its
 * error is in dp_last_error(). */
static int train_tiny(const char **args, int count)
{
    dp_options o;
    ck_assert_int_eq(parse(&o, args, count), 0);
    dp_dataset data;
    ck_assert_int_eq(dp_dataset_open("synthetic:32,4,3", 0, 0, 1, &data), 0);
    dp_comm c;
    ck_assert_int_eq(dp_comm_init(&c, MPI_COMM_WORLD, o.allreduce), 0);
    dp_train_result result;
    int status = dp_train(&o, &data, NULL, &c, &result, 0);
    dp_comm_free(&c);
    dp_dataset_free(&data);
    return status;
}

START_TEST(gpu_only_algorithm_with_cpu_training_fails_naming_both)
{
#ifdef HAVE_NCCL
    const char *args[] = {"--device", "cpu", "--allreduce", "nccl", "--layers", "4,3", "--steps", "1",
                          "--batch", "8", "--quiet"};
    ck_assert_int_eq(train_tiny(args, 11), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "nccl sums GPU memory") && strstr(dp_last_error(), "--device cpu"),
                  "%s", dp_last_error());
#endif
}
END_TEST

/* bf16 passes the options (auto may find GPUs), and the CPU backend declines it when the run
 * opens it, through dp_backend_require, before anything is allocated or trained. */
START_TEST(bf16_training_on_the_cpu_is_declined_by_the_backend)
{
    const char *args[] = {"--device", "cpu", "--precision", "bf16", "--layers", "4,3", "--steps", "1",
                          "--batch", "8", "--quiet"};
    ck_assert_int_eq(train_tiny(args, 11), DP_EINVAL);
    ck_assert_msg(strstr(dp_last_error(), "the cpu backend cannot run gemm in BF16") &&
                  strstr(dp_last_error(), "--device cuda"), "%s", dp_last_error());
}
END_TEST

int main(int argc, char **argv)
{
    int rank, size;
    dp_test_mpi_init(&argc, &argv, &rank, &size);
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("choice");
    tcase_add_test(tc, cpu_backend_takes_float32_and_declines_bf16);
    tcase_add_test(tc, binding_gives_each_rank_its_own_gpu_by_identity);
    tcase_add_test(tc, binding_text_lists_the_first_ranks);
    tcase_add_test(tc, auto_takes_cuda_only_when_every_local_rank_gets_a_gpu);
    tcase_add_test(tc, cuda_fails_naming_the_missing_gpu_or_the_crowding);
    tcase_add_test(tc, cuda_aware_follows_the_request_and_what_mpi_says);
    tcase_add_test(tc, gpu_memory_reaches_only_algorithms_that_take_it);
    tcase_add_test(tc, device_options_parse_and_reject_gpu_flags_on_the_cpu);
    tcase_add_test(tc, gpu_only_algorithm_with_cpu_training_fails_naming_both);
    tcase_add_test(tc, bf16_training_on_the_cpu_is_declined_by_the_backend);
    suite_add_tcase(s, tc);
    int failed = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
