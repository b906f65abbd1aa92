/* The backend test table: every operation of dp_backend (include/dp/backend.h), at the shapes
 * and dtypes of its row, on every backend this process has: the CPU backend with the loops of
 * each instruction set this machine runs on 1 thread and the best on 3 (neither may change a
 * bit of a fixed-order result), and the CUDA backend when a GPU is visible: the
 * fake CUDA runtime's (tests/fakecuda/test_backend_ops, run by tests/fakecuda.sh) or a real one
 * (tests/test_backend_ops on a GPU machine; without a GPU it runs the CPU rows alone). Each
 * output is compared with a reference the test computes itself (tests/ops/) within the row's
 * tolerance, and with the CPU's bits as its operand declares (op_agreement): elementwise results
 * on every backend, fixed-order sums on every CPU thread count.
 *
 * Adding an operation: its prepare/run/reference in the tests/ops/ file of its family, its rows
 * here. Adding a dtype: rows with that dtype and a reference that rounds to it. */
#include "dp/backend.h"
#include "dp/error.h"
#include "src/backend/cpu_loops.h"
#include "tests/ops/op_table.h"
#include "tests/testutil.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Edge cases: no rows, one element, odd widths below and above a vector's lanes (8 floats
 * under AVX2, 16 under AVX-512, 32 a warp), and 1.2 M values, which the CPU splits in 4 parts
 * among its threads. */
static const op_shape matrices[] = {{0, 7, 0}, {1, 1, 0}, {3, 5, 0}, {67, 77, 0}, {301, 33, 0}, {1029, 257, 0},
                                    {4099, 301, 0}, {-1, 0, 0}};
/* Per-feature operations: their columns alone. */
static const op_shape features[] = {{1, 0, 0}, {1, 1, 0}, {1, 17, 0}, {1, 77, 0}, {1, 4099, 0}, {-1, 0, 0}};
/* Classes: fewer than a warp's lanes, one more, many per lane. */
static const op_shape logits[] = {{0, 10, 0}, {1, 1, 0}, {1000, 10, 0}, {3, 33, 0}, {77, 1000, 0}, {2000, 100, 0},
                                  {-1, 0, 0}};
/* A reduction over several blocks of a GPU's grid. */
static const op_shape lengths[] = {{0, 1, 0}, {1, 1, 0}, {67, 77, 0}, {1000003, 1, 0}, {-1, 0, 0}};
/* m, n, k: empty results, an empty sum (a rank without rows: beta C), odd sizes, a deep k. */
static const op_shape products[] = {{0, 5, 3}, {4, 0, 3}, {5, 3, 0}, {1, 1, 1}, {37, 53, 29}, {129, 65, 257},
                                    {64, 96, 2048}, {-1, 0, 0}};

/* Samples of one window geometry (the row's param, tests/ops/windows.c): none, one, three. */
static const op_shape samples[] = {{0, 0, 0}, {1, 0, 0}, {3, 0, 0}, {-1, 0, 0}};

/* swap_axes' outer and middle axes: channels and samples of a convolution, both ways. */
static const op_shape swaps[] = {{0, 3, 0}, {1, 1, 0}, {3, 64, 0}, {64, 3, 0}, {32, 128, 0}, {-1, 0, 0}};

/* The same bits as the reference (any NaN as any NaN). */
static const op_tolerance bits = {0};
/* A sum of `rows` (or k) terms in float or double, in any order. */
static const op_tolerance float_sum = {.per_term = FLT_EPSILON};
static const op_tolerance double_sum = {.per_term = DBL_EPSILON};
/* exp and log: a GPU's may differ from glibc's in the last bit, and its sums run in a tree. */
static const op_tolerance libm = {.rel = 1e-6, .abs = 1e-7};

#define F32 OP_DTYPE_F32
#define I32 OP_DTYPE_I32

static const op_case cases[] = {
    {"gemm", "A B, beta 0", F32, 0, products, float_sum, &op_gemm},
    {"gemm", "A^T B, beta 0", F32, 1, products, float_sum, &op_gemm},
    {"gemm", "A B^T, beta 0", F32, 2, products, float_sum, &op_gemm},
    {"gemm", "A^T B^T, beta 0", F32, 3, products, float_sum, &op_gemm},
    {"gemm", "A B, beta 0.5", F32, 4, products, float_sum, &op_gemm},
    {"gemm", "A^T B^T, beta 0.5", F32, 7, products, float_sum, &op_gemm},
    {"bias_act_forward", "bias", F32, 1, matrices, bits, &op_bias_act_forward},
    {"bias_act_forward", "ReLU, no bias", F32, 2, matrices, bits, &op_bias_act_forward},
    {"bias_act_forward", "bias and ReLU", F32, 3, matrices, bits, &op_bias_act_forward},
    {"relu_forward", "", F32, 0, matrices, bits, &op_relu_forward},
    {"relu_backward", "", F32, 0, matrices, bits, &op_relu_backward},
    {"bias_grad", "overwrite", F32, 0, matrices, float_sum, &op_bias_grad},
    {"bias_grad", "accumulate", F32, 1, matrices, float_sum, &op_bias_grad},
    {"dropout_forward", "p 0.3", F32, 30, matrices, bits, &op_dropout_forward},
    {"dropout_forward", "p 0", F32, 0, matrices, bits, &op_dropout_forward},
    {"multiply", "y = x mask", F32, 0, matrices, bits, &op_multiply},
    {"multiply", "in place", F32, 0, matrices, bits, &op_multiply_in_place},
    {"accumulate", "copy", F32, 0, matrices, bits, &op_accumulate},
    {"accumulate", "add", F32, 1, matrices, bits, &op_accumulate},
    {"column_sums", "", F32, 0, matrices, double_sum, &op_column_sums},
    {"bn_normalize", "eval (no x-hat)", F32, 0, matrices, bits, &op_bn_normalize},
    {"bn_normalize", "training", F32, 1, matrices, bits, &op_bn_normalize},
    {"bn_backward_input", "", F32, 0, matrices, bits, &op_bn_backward_input},
    {"bn_param_grads", "overwrite", F32, 0, features, bits, &op_bn_param_grads},
    {"bn_param_grads", "accumulate", F32, 1, features, bits, &op_bn_param_grads},
    {"bn_update_running", "", F32, 0, features, bits, &op_bn_update_running},
    {"inverse_std", "", F32, 0, features, bits, &op_inverse_std},
    {"bn_channel_sums", "channels x pixels", F32, 0, matrices, bits, &op_bn_channel_sums},
    {"bn_batch_stats", "over 2 values", F32, 2, features, bits, &op_bn_batch_stats},
    {"bn_batch_stats", "over 6272 values", F32, 6272, features, bits, &op_bn_batch_stats},
    {"bn_means", "over 96 values", F32, 96, features, bits, &op_bn_means},
    {"bn_spread", "one row", F32, 1, matrices, bits, &op_bn_spread},
    {"bn_spread", "two rows", F32, 2, matrices, bits, &op_bn_spread},
    {"softmax_xent", "training", F32, 0, logits, libm, &op_softmax_xent},
    {"softmax_xent", "eval (no gradient)", F32, 1, logits, libm, &op_softmax_xent},
    {"softmax_xent", "NaN, infinities and ties", F32, 2, logits, libm, &op_softmax_xent},
    {"mse", "training", F32, 0, matrices, double_sum, &op_mse},
    {"mse", "eval (no gradient)", F32, 1, matrices, double_sum, &op_mse},
    {"count_nonfinite", "", F32, 0, lengths, bits, &op_count_nonfinite},
    {"sum_squares", "scale 1", F32, 0, lengths, double_sum, &op_sum_squares},
    {"sum_squares", "scale 1/48", F32, 48, lengths, double_sum, &op_sum_squares},
    {"sgd_step", "plain", F32, 0, matrices, bits, &op_sgd_step},
    {"sgd_step", "weight decay", F32, 1, matrices, bits, &op_sgd_step},
    {"sgd_step", "momentum and weight decay", F32, 2, matrices, bits, &op_sgd_step},
    {"sgd_step", "scale and count only", F32, 3, matrices, bits, &op_sgd_step},
    {"adamw_step", "update", F32, 0, matrices, bits, &op_adamw_step},
    {"adamw_step", "scale and count only", F32, 1, matrices, bits, &op_adamw_step},
    {"im2col", "28x28, k 3, padding 1", F32, 0, samples, bits, &op_im2col},
    {"im2col", "3 channels 7x6, stride 2, padding 1", F32, 1, samples, bits, &op_im2col},
    {"im2col", "k 5, padding 2", F32, 2, samples, bits, &op_im2col},
    {"im2col", "k 1", F32, 3, samples, bits, &op_im2col},
    {"col2im", "28x28, k 3, padding 1", F32, 0, samples, float_sum, &op_col2im},
    {"col2im", "3 channels 7x6, stride 2, padding 1", F32, 1, samples, float_sum, &op_col2im},
    {"col2im", "k 5, padding 2", F32, 2, samples, float_sum, &op_col2im},
    {"col2im", "k 1", F32, 3, samples, float_sum, &op_col2im},
    {"swap_axes", "runs of 1", F32, 1, matrices, bits, &op_swap_axes},
    {"swap_axes", "runs of 196 (the recipe's second conv2d)", F32, 196, swaps, bits, &op_swap_axes},
    {"pool_forward", "max 2x2", F32, 4, samples, bits, &op_pool_forward},
    {"pool_forward", "max 3x3 stride 2", F32, 5, samples, bits, &op_pool_forward},
    {"pool_forward", "max 2x2, odd sides", F32, 6, samples, bits, &op_pool_forward},
    {"pool_forward", "max 2x2, rows of 7 windows", F32, 7, samples, bits, &op_pool_forward},
    {"pool_forward", "max 3x3 stride 2 padding 1", F32, 8, samples, bits, &op_pool_forward},
    {"pool_forward", "avg 2x2", F32, 4 + 256, samples, float_sum, &op_pool_forward},
    {"pool_forward", "avg 3x3 stride 2 padding 1", F32, 8 + 256, samples, float_sum, &op_pool_forward},
    {"pool_forward", "global avg 7x5", F32, 9 + 256, samples, float_sum, &op_pool_forward},
    {"pool_forward", "avg 3x3 stride 2", F32, 5 + 256, samples, float_sum, &op_pool_forward},
    {"pool_backward", "max 2x2", F32, 4, samples, float_sum, &op_pool_backward},
    {"pool_backward", "max 3x3 stride 2 padding 1", F32, 8, samples, float_sum, &op_pool_backward},
    {"pool_backward", "max 3x3 stride 2", F32, 5, samples, float_sum, &op_pool_backward},
    {"pool_backward", "max 2x2, odd sides", F32, 6, samples, float_sum, &op_pool_backward},
    {"pool_backward", "max 2x2, rows of 7 windows", F32, 7, samples, float_sum, &op_pool_backward},
    {"pool_backward", "avg 2x2", F32, 4 + 256, samples, float_sum, &op_pool_backward},
    {"pool_backward", "avg 3x3 stride 2", F32, 5 + 256, samples, float_sum, &op_pool_backward},
    {"pool_backward", "avg 3x3 stride 2 padding 1", F32, 8 + 256, samples, float_sum, &op_pool_backward},
    {"pool_backward", "global avg 7x5", F32, 9 + 256, samples, float_sum, &op_pool_backward},
    {"zero", "", F32, 0, matrices, bits, &op_zero},
    {"upload, download", "through alloc_host", F32, 0, matrices, bits, &op_copies},
    {"gather_rows", "float rows", F32, 0, matrices, bits, &op_gather_rows},
    {"gather_rows", "int32 words (labels)", I32, 1, matrices, bits, &op_gather_rows},
};
enum { CASES = sizeof cases / sizeof *cases };

static void use_cpu(const op_backend *b)
{
    dp_backend_cpu_use_loops(dp_cpu_loops_for(b->cpu_isa));
    dp_backend_cpu_set_threads(b->cpu_threads, "the test");
    ck_assert_msg(strstr(b->be->describe(b->be), b->cpu_isa), "the CPU backend runs other loops than %s: %s", b->cpu_isa,
                  b->be->describe(b->be));
}

static const char *const isas[] = {"generic", "avx2", "avx512"};

/* Each instruction set this machine runs on one thread, the best on 3, a GPU when visible. */
static op_backend backends[sizeof isas / sizeof *isas + 2];
static int backend_count;

static void add_cpu(const char *isa, int threads)
{
    op_backend *b = &backends[backend_count++];
    *b = (op_backend){.be = dp_backend_cpu(), .on_cpu = 1, .cpu_isa = isa, .cpu_threads = threads, .use = use_cpu};
    snprintf(b->label, sizeof b->label, "cpu %s, %d thread%s", isa, threads, threads == 1 ? "" : "s");
}

/* In each test's process: the CUDA backend is opened after Check's fork, as CUDA requires. */
static void setup(void)
{
    backend_count = 0;
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++)
        if (dp_cpu_loops_for(isas[i]))
            add_cpu(isas[i], 1);
    add_cpu(dp_cpu_loops_best()->isa, 3);
    if (dp_backend_gpu_count() == 0)
        return;
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .share_gpu = 1, .local_size = 1};
    op_backend *b = &backends[backend_count];
    ck_assert_msg(dp_backend_open(&request, &b->be) == 0, "%s", dp_last_error());
    snprintf(b->label, sizeof b->label, "cuda");
    backend_count++;
}

static void teardown(void)
{
    dp_backend_cpu_use_loops(NULL);
    dp_backend_cpu_set_threads(1, NULL);
    if (!backends[backend_count - 1].on_cpu)
        dp_backend_close(backends[backend_count - 1].be);
}

START_TEST(row_agrees_on_every_backend)
{
    if (_i == 0) {
        for (int b = 0; b < backend_count; b++)
            printf("backend %d: %s\n", b, backends[b].on_cpu ? backends[b].label : backends[b].be->describe(backends[b].be));
        if (backends[backend_count - 1].on_cpu)
            printf("no CUDA GPU visible: the CPU alone\n");
    }
    op_check_case(&cases[_i], backends, backend_count);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("backend-ops");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, row_agrees_on_every_backend, 0, CASES);
    suite_add_tcase(s, tc);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
