/* The CUDA backend's fused GEMMs (gemm_fused: cuBLASLt epilogues) at every precision: each
 * epilogue against the CPU's GEMM and pass (relative L2 error under 1e-5 in FP32, 1e-2 in TF32,
 * 2e-2 in bf16, whose inputs keep 7 mantissa bits; there the bias gradient is declined, as it
 * would sum the bf16 copy of dY), and against the same backend's unfused
 * GEMM and kernel: bitwise on the fake CUDA runtime, whose cuBLASLt applies the epilogue to
 * cuBLAS's product with the kernels' arithmetic (on a GPU, within the CPU's tolerance). Then a
 * model: which GEMMs a Sequential fuses where the backend runs the epilogues, where cuBLASLt
 * lacks one (the fake's FAKECUDA_LT_DECLINE), under --fuse off and for a later micro-batch,
 * each pass's outputs and gradients equal to the unfused model's. At bf16 a forward GEMM also
 * writes its output in bf16 (gemm_rounded_bf16): the FP32 result rounded to nearest even, bitwise
 * on the fake; and a model writes bf16 activations where only the next Linear reads them, with
 * the activation memory that saves. Exits 77 without a GPU. */
#include "dp/backend.h"
#include "dp/error.h"
#include "dp/memory.h"
#include "dp/nn.h"
#include "dp/rng.h"
#include "src/backend/kernel_math.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_SKIP = 77, ROWS = 37, IN = 29, OUT = 131, NEXT = 7 };

static const dp_backend *cpu, *gpu;
static int bitwise; /* the fake runtime: fused equals unfused to the bit */

static const dp_backend *open_gpu(dp_precision precision, int unfused)
{
    const dp_backend *be;
    dp_backend_request request = {.device = DP_DEVICE_CUDA, .share_gpu = 1, .precision = precision,
                                  .unfused = unfused, .local_size = 1};
    ck_assert_msg(dp_backend_open(&request, &be) == 0, "%s", dp_last_error());
    return be;
}

static float *random_floats(size_t n, uint64_t seed)
{
    dp_rng rng;
    dp_rng_seed(&rng, seed);
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++)
        x[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    return x;
}

static float *to_gpu(const float *host, size_t n)
{
    float *dev = gpu->alloc(gpu, (n ? n : 1) * sizeof *dev, DP_MEM_OTHER, "a test input");
    ck_assert_msg(dev != NULL, "%s", dp_last_error());
    gpu->upload(gpu, dev, host, n * sizeof *dev);
    return dev;
}

static float *from_gpu(const float *dev, size_t n)
{
    float *host = malloc((n ? n : 1) * sizeof *host);
    ck_assert_ptr_nonnull(host);
    gpu->download(gpu, host, dev, n * sizeof *host);
    return host;
}

/* The fused result against the unfused one (same backend) and the CPU's. */
static void compare(const char *what, const float *fused, const float *unfused, const float *reference, size_t n,
                    double tolerance)
{
    if (bitwise)
        ck_assert_msg(memcmp(fused, unfused, n * sizeof *fused) == 0, "%s: fused differs from unfused", what);
    double error = dp_test_relative_error(fused, reference, n);
    ck_assert_msg(error < tolerance, "%s: relative error %g against the CPU (tolerance %g)", what, error, tolerance);
}

/* One Linear's GEMMs with every epilogue: forward y = x W^T + b (bias; ReLU; ReLU with its
 * mask), the next layer's dX through that mask, and dW = dY^T X with db where the backend fuses it. */
static void check_epilogues(double tolerance, int bias_grad_fused)
{
    float *x = random_floats((size_t)ROWS * IN, 1), *w = random_floats((size_t)OUT * IN, 2);
    float *bias = random_floats(OUT, 3), *dy = random_floats((size_t)ROWS * OUT, 4);
    float *dnext = random_floats((size_t)ROWS * NEXT, 5), *w_next = random_floats((size_t)NEXT * OUT, 6);
    float *dx = to_gpu(x, (size_t)ROWS * IN), *dw = to_gpu(w, (size_t)OUT * IN), *dbias = to_gpu(bias, OUT);
    float *ddy = to_gpu(dy, (size_t)ROWS * OUT), *ddnext = to_gpu(dnext, (size_t)ROWS * NEXT);
    float *dw_next = to_gpu(w_next, (size_t)NEXT * OUT);
    float *fused = to_gpu(dy, (size_t)ROWS * OUT), *unfused = to_gpu(dy, (size_t)ROWS * OUT);
    float *grad = to_gpu(w, (size_t)OUT * IN), *grad_unfused = to_gpu(w, (size_t)OUT * IN);
    float *y_relu = to_gpu(dy, (size_t)ROWS * OUT);
    unsigned char *mask = gpu->alloc(gpu, dp_relu_mask_bytes(ROWS, OUT), DP_MEM_OTHER, "a ReLU mask");
    float *ref = malloc((size_t)ROWS * OUT * sizeof *ref), *y_ref = malloc((size_t)ROWS * OUT * sizeof *y_ref);
    float *grad_ref = malloc((size_t)OUT * IN * sizeof *grad_ref), *bias_ref = malloc(OUT * sizeof *bias_ref);
    long ld = dp_relu_mask_ld(OUT);
    static const struct {
        dp_epilogue kind;
        int relu;
        const char *name;
    } forwards[] = {{DP_EPILOGUE_BIAS, 0, "bias"}, {DP_EPILOGUE_RELU, 1, "relu"}, {DP_EPILOGUE_RELU_MASK, 1, "relu_mask"}};
    for (size_t f = 0; f < sizeof forwards / sizeof *forwards; f++) {
        dp_gemm_epilogue e = {.kind = forwards[f].kind, .bias = dbias, .mask = mask, .mask_ld = ld};
        gpu->gemm_fused(gpu, 0, 1, ROWS, OUT, IN, 1.0f, dx, IN, dw, IN, 0.0f, fused, OUT, &e);
        gpu->gemm(gpu, 0, 1, ROWS, OUT, IN, 1.0f, dx, IN, dw, IN, 0.0f, unfused, OUT);
        gpu->bias_act_forward(gpu, unfused, dbias, ROWS, OUT, forwards[f].relu);
        cpu->gemm(cpu, 0, 1, ROWS, OUT, IN, 1.0f, x, IN, w, IN, 0.0f, y_ref, OUT);
        cpu->bias_act_forward(cpu, y_ref, bias, ROWS, OUT, forwards[f].relu);
        float *got = from_gpu(fused, (size_t)ROWS * OUT), *plain = from_gpu(unfused, (size_t)ROWS * OUT);
        compare(forwards[f].name, got, plain, y_ref, (size_t)ROWS * OUT, tolerance);
        free(got);
        free(plain);
    }
    gpu->accumulate(gpu, y_relu, fused, (size_t)ROWS * OUT, 0); /* the ReLU's output, whose mask is kept */
    /* The next layer's dX = dNext W_next through the mask, against the GEMM then relu_backward. */
    dp_gemm_epilogue drelu = {.kind = DP_EPILOGUE_DRELU, .mask = mask, .mask_ld = ld};
    gpu->gemm_fused(gpu, 0, 0, ROWS, OUT, NEXT, 1.0f, ddnext, NEXT, dw_next, OUT, 0.0f, fused, OUT, &drelu);
    gpu->gemm(gpu, 0, 0, ROWS, OUT, NEXT, 1.0f, ddnext, NEXT, dw_next, OUT, 0.0f, unfused, OUT);
    gpu->relu_backward(gpu, unfused, y_relu, (size_t)ROWS * OUT);
    cpu->gemm(cpu, 0, 0, ROWS, OUT, NEXT, 1.0f, dnext, NEXT, w_next, OUT, 0.0f, ref, OUT);
    cpu->relu_backward(cpu, ref, y_ref, (size_t)ROWS * OUT);
    float *got = from_gpu(fused, (size_t)ROWS * OUT), *plain = from_gpu(unfused, (size_t)ROWS * OUT);
    compare("drelu", got, plain, ref, (size_t)ROWS * OUT, tolerance);
    free(got);
    free(plain);
    /* dW = dY^T X with db = dY's column sums, for ROWS rows and for none (a rank without samples). */
    for (int rows = ROWS; bias_grad_fused && rows >= 0; rows -= ROWS) {
        dp_gemm_epilogue bgrad = {.kind = DP_EPILOGUE_BIAS_GRAD, .bias_grad = fused};
        gpu->gemm_fused(gpu, 1, 0, OUT, IN, rows, 1.0f, ddy, OUT, dx, IN, 0.0f, grad, IN, &bgrad);
        gpu->gemm(gpu, 1, 0, OUT, IN, rows, 1.0f, ddy, OUT, dx, IN, 0.0f, grad_unfused, IN);
        gpu->bias_grad(gpu, ddy, rows, OUT, unfused, 0);
        cpu->gemm(cpu, 1, 0, OUT, IN, rows, 1.0f, dy, OUT, x, IN, 0.0f, grad_ref, IN);
        cpu->bias_grad(cpu, dy, rows, OUT, bias_ref, 0);
        float *dw_got = from_gpu(grad, (size_t)OUT * IN), *dw_plain = from_gpu(grad_unfused, (size_t)OUT * IN);
        float *db_got = from_gpu(fused, OUT), *db_plain = from_gpu(unfused, OUT);
        if (rows) {
            compare("bias_grad's dW", dw_got, dw_plain, grad_ref, (size_t)OUT * IN, tolerance);
            compare("bias_grad's db", db_got, db_plain, bias_ref, OUT, tolerance);
        }
        for (size_t i = 0; !rows && i < (size_t)OUT * IN; i++) /* no rows: zeros, as the unfused passes give */
            ck_assert_msg(dw_got[i] == 0.0f && (i >= OUT || db_got[i] == 0.0f), "no rows: dW[%zu] %g", i, dw_got[i]);
        free(dw_got);
        free(dw_plain);
        free(db_got);
        free(db_plain);
        if (!rows)
            break;
    }
    float *device[] = {dx, dw, dbias, ddy, ddnext, dw_next, fused, unfused, grad, grad_unfused, y_relu};
    for (size_t i = 0; i < sizeof device / sizeof *device; i++)
        gpu->free(gpu, device[i]);
    gpu->free(gpu, mask);
    float *host[] = {x, w, bias, dy, dnext, w_next, ref, y_ref, grad_ref, bias_ref};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* At bf16 the GEMMs read bf16 copies of their operands, so BGRADB would sum dY's bf16 copy: the
 * backend declines it there and the bias gradient stays the unfused pass's FP32 sum. */
START_TEST(each_epilogue_equals_its_unfused_passes_at_every_precision)
{
    static const struct {
        dp_precision precision;
        double tolerance;
        int bias_grad_fused;
    } precisions[] = {{DP_PRECISION_FP32, 1e-5, 1}, {DP_PRECISION_TF32, 1e-2, 1}, {DP_PRECISION_BF16, 2e-2, 0}};
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++) {
        gpu = open_gpu(precisions[p].precision, 0);
        for (int kind = 0; kind < DP_EPILOGUES; kind++) {
            int status = dp_backend_require(gpu, dp_epilogue_ops[kind], DP_DTYPE_F32);
            if (kind != DP_EPILOGUE_BIAS_GRAD || precisions[p].bias_grad_fused)
                ck_assert_msg(status == 0, "%s", dp_last_error());
            else
                ck_assert_msg(status != 0 && strstr(dp_last_error(), "would sum the bf16 copy") != NULL,
                              "bf16 and %s: %s", dp_epilogue_ops[kind], status ? dp_last_error() : "taken");
        }
        check_epilogues(precisions[p].tolerance, precisions[p].bias_grad_fused);
        dp_backend_close(gpu);
    }
}
END_TEST

/* x rounded to bf16 and widened back: what a bf16 copy holds. */
static float *bf16_values(const float *x, size_t n)
{
    float *r = malloc((n ? n : 1) * sizeof *r);
    ck_assert_ptr_nonnull(r);
    for (size_t i = 0; i < n; i++)
        r[i] = dp_bf16_value(dp_bf16_bits(x[i]));
    return r;
}

static void *bf16_copy_on_gpu(const float *dev, size_t n)
{
    void *copy = gpu->alloc(gpu, (n ? n : 1) * sizeof(uint16_t), DP_MEM_OTHER, "a bf16 copy");
    ck_assert_msg(copy != NULL, "%s", dp_last_error());
    gpu->round_operand(gpu, copy, dev, n);
    return copy;
}

/* gemm_rounded_bf16 with each forward epilogue, with and without a bias: on the fake, bitwise the
 * FP32 output of gemm_rounded (its bias the bf16 copy's values) rounded to nearest even, and the
 * same mask; on a GPU, within bf16's tolerance of the CPU's GEMM and pass. */
START_TEST(a_bf16_output_is_the_fp32_output_rounded)
{
    gpu = open_gpu(DP_PRECISION_BF16, 0);
    ck_assert_msg(dp_backend_require(gpu, "gemm_rounded_bf16", DP_DTYPE_BF16) == 0, "%s", dp_last_error());
    size_t nx = (size_t)ROWS * IN, nw = (size_t)OUT * IN, ny = (size_t)ROWS * OUT;
    float *x = random_floats(nx, 31), *w = random_floats(nw, 32), *bias = random_floats(OUT, 33);
    float *bias_r = bf16_values(bias, OUT), *x_r = bf16_values(x, nx), *w_r = bf16_values(w, nw);
    float *dx = to_gpu(x, nx), *dw = to_gpu(w, nw), *dbias = to_gpu(bias, OUT), *dbias_r = to_gpu(bias_r, OUT);
    void *x16 = bf16_copy_on_gpu(dx, nx), *w16 = bf16_copy_on_gpu(dw, nw), *bias16 = bf16_copy_on_gpu(dbias, OUT);
    uint16_t *y16 = gpu->alloc(gpu, ny * sizeof *y16, DP_MEM_OTHER, "a bf16 output");
    float *y = gpu->alloc(gpu, ny * sizeof *y, DP_MEM_OTHER, "an FP32 output");
    unsigned char *mask16 = gpu->alloc(gpu, dp_relu_mask_bytes(ROWS, OUT), DP_MEM_OTHER, "a mask");
    unsigned char *mask = gpu->alloc(gpu, dp_relu_mask_bytes(ROWS, OUT), DP_MEM_OTHER, "a mask");
    float *ref = malloc(ny * sizeof *ref), *got = malloc(ny * sizeof *got);
    uint16_t *bits = malloc(ny * sizeof *bits);
    unsigned char *mask_got = malloc(dp_relu_mask_bytes(ROWS, OUT)), *mask_want = malloc(dp_relu_mask_bytes(ROWS, OUT));
    static const dp_epilogue kinds[] = {DP_EPILOGUE_BIAS, DP_EPILOGUE_RELU, DP_EPILOGUE_RELU_MASK};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            long ld = dp_relu_mask_ld(OUT);
            dp_gemm_epilogue e16 = {.kind = kinds[k], .bias16 = with_bias ? bias16 : NULL, .mask = mask16, .mask_ld = ld};
            dp_gemm_epilogue e = {.kind = kinds[k], .bias = with_bias ? dbias_r : NULL, .mask = mask, .mask_ld = ld};
            gpu->gemm_rounded_bf16(gpu, 0, 1, ROWS, OUT, IN, 1.0f, x16, IN, w16, IN, y16, OUT, &e16);
            gpu->gemm_rounded(gpu, 0, 1, ROWS, OUT, IN, 1.0f, x16, IN, w16, IN, 0.0f, y, OUT, &e);
            gpu->download(gpu, bits, y16, ny * sizeof *bits);
            gpu->download(gpu, got, y, ny * sizeof *got);
            for (size_t i = 0; i < ny; i++) {
                if (bitwise)
                    ck_assert_msg(bits[i] == dp_bf16_bits(got[i]), "%s, bias %d: value %zu is %#x, the FP32 %g "
                                  "rounds to %#x", dp_epilogue_ops[kinds[k]], with_bias, i, bits[i], got[i],
                                  dp_bf16_bits(got[i]));
                got[i] = dp_bf16_value(bits[i]);
            }
            cpu->gemm(cpu, 0, 1, ROWS, OUT, IN, 1.0f, x_r, IN, w_r, IN, 0.0f, ref, OUT);
            cpu->bias_act_forward(cpu, ref, with_bias ? bias_r : NULL, ROWS, OUT, kinds[k] != DP_EPILOGUE_BIAS);
            double error = dp_test_relative_error(got, ref, ny);
            ck_assert_msg(error < 2e-2, "%s, bias %d: relative error %g against the CPU", dp_epilogue_ops[kinds[k]],
                          with_bias, error);
            if (kinds[k] != DP_EPILOGUE_RELU_MASK || !bitwise)
                continue;
            gpu->download(gpu, mask_got, mask16, dp_relu_mask_bytes(ROWS, OUT));
            gpu->download(gpu, mask_want, mask, dp_relu_mask_bytes(ROWS, OUT));
            ck_assert_msg(memcmp(mask_got, mask_want, dp_relu_mask_bytes(ROWS, OUT)) == 0, "bias %d: the bf16 "
                          "output's ReLU mask differs from the FP32 output's", with_bias);
        }
    void *device[] = {dx, dw, dbias, dbias_r, x16, w16, bias16, y16, y, mask16, mask};
    for (size_t i = 0; i < sizeof device / sizeof *device; i++)
        gpu->free(gpu, device[i]);
    void *host[] = {x, w, bias, bias_r, x_r, w_r, ref, got, bits, mask_got, mask_want};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
    dp_backend_close(gpu);
}
END_TEST

START_TEST(the_cpu_and_fuse_off_decline_every_epilogue)
{
    gpu = open_gpu(DP_PRECISION_FP32, 1);
    for (int kind = 0; kind < DP_EPILOGUES; kind++) {
        ck_assert_int_ne(dp_backend_require(cpu, dp_epilogue_ops[kind], DP_DTYPE_F32), 0);
        ck_assert_int_ne(dp_backend_require(gpu, dp_epilogue_ops[kind], DP_DTYPE_F32), 0);
        ck_assert_msg(strstr(dp_last_error(), "--fuse off") != NULL, "%s", dp_last_error());
    }
    ck_assert_ptr_nonnull(strstr(gpu->describe(gpu), "no fused epilogues"));
    dp_backend_close(gpu);
}
END_TEST

/* ---- a model's fused GEMMs, counted by a backend that passes them on ---- */

static dp_backend counting;
static const dp_backend *counted;
static int calls[DP_EPILOGUES];

static void count_fused(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc,
                        const dp_gemm_epilogue *e)
{
    (void)be;
    calls[e->kind]++;
    counted->gemm_fused(counted, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e);
}

enum { M_INPUTS = 8, M_ROWS = 12 };
#define SPEC "linear(16,bias=0),relu,linear(16),relu,linear(3)"

static void build(dp_model *m, const dp_backend *be)
{
    dp_model_spec spec;
    ck_assert_int_eq(dp_model_spec_parse(SPEC, &spec), 0);
    ck_assert_msg(dp_model_create(m, be, &spec, M_INPUTS, M_ROWS) == 0, "%s", dp_last_error());
    size_t n = dp_params_floats(&m->params);
    float *params = malloc(n * sizeof *params), buffers[1];
    int64_t counters[1];
    dp_model_init(m, 11, params, buffers, counters);
    be->upload(be, m->weights, params, n * sizeof *params);
    free(params);
}

/* A training pass (forward, loss, backward; accumulate: a later micro-batch's) or an eval
 * forward; the output and the gradients come back to the host. */
static void pass(dp_model *m, const dp_backend *be, int training, int accumulate, float **out, float **grads)
{
    float *x = random_floats((size_t)M_ROWS * M_INPUTS, 21);
    int32_t labels[M_ROWS];
    for (int r = 0; r < M_ROWS; r++)
        labels[r] = r % 3;
    float *dx = be->alloc(be, sizeof(float) * M_ROWS * M_INPUTS, DP_MEM_OTHER, "inputs");
    int32_t *dlabels = be->alloc(be, sizeof labels, DP_MEM_OTHER, "labels");
    double *totals = be->alloc(be, 2 * sizeof(double), DP_MEM_OTHER, "totals");
    be->upload(be, dx, x, sizeof(float) * M_ROWS * M_INPUTS);
    be->upload(be, dlabels, labels, sizeof labels);
    be->zero(be, (float *)totals, 4);
    dp_nn_context ctx = {.be = be, .training = training, .accumulate = accumulate, .seed = 3};
    const float *y;
    ck_assert_int_eq(dp_model_forward(m, &ctx, dx, M_ROWS, &y), 0);
    if (training) {
        dp_model_loss(m, DP_LOSS_XENT, y, dlabels, NULL, M_ROWS, m->delta[0], totals);
        ck_assert_int_eq(dp_model_backward(m, &ctx, m->delta[0], M_ROWS, NULL), 0);
    }
    size_t n = dp_params_floats(&m->params);
    *out = malloc(sizeof(float) * M_ROWS * 3);
    *grads = malloc(n * sizeof **grads);
    be->download(be, *out, y, sizeof(float) * M_ROWS * 3);
    be->download(be, *grads, m->grads, n * sizeof **grads);
    be->free(be, dx);
    be->free(be, dlabels);
    be->free(be, totals);
    free(x);
}

/* The model on `be` (counted) against the unfused model, pass for pass, and the calls made. */
static void check_model(const dp_backend *be, const int expect_train[DP_EPILOGUES], const int expect_eval[DP_EPILOGUES],
                        const int expect_accumulate[DP_EPILOGUES])
{
    const dp_backend *plain = open_gpu(DP_PRECISION_FP32, 1);
    counted = be;
    counting = *be;
    counting.gemm_fused = count_fused;
    dp_model fused_model, plain_model;
    build(&fused_model, &counting);
    build(&plain_model, plain);
    const int *expect[] = {expect_train, expect_accumulate, expect_eval};
    const int training[] = {1, 1, 0}, accumulate[] = {0, 1, 0};
    size_t n = dp_params_floats(&fused_model.params);
    for (int p = 0; p < 3; p++) {
        memset(calls, 0, sizeof calls);
        float *out, *grads, *plain_out, *plain_grads;
        pass(&fused_model, &counting, training[p], accumulate[p], &out, &grads);
        pass(&plain_model, plain, training[p], accumulate[p], &plain_out, &plain_grads);
        for (int kind = 0; kind < DP_EPILOGUES; kind++)
            ck_assert_msg(calls[kind] == expect[p][kind], "pass %d: %s called %d times, expected %d", p,
                          dp_epilogue_ops[kind], calls[kind], expect[p][kind]);
        compare("the model's output", out, plain_out, plain_out, (size_t)M_ROWS * 3, 1e-5);
        compare("the model's gradients", grads, plain_grads, plain_grads, n, 1e-5);
        free(out);
        free(grads);
        free(plain_out);
        free(plain_grads);
    }
    dp_model_free(&fused_model);
    dp_model_free(&plain_model);
    dp_backend_close(plain);
}

START_TEST(a_sequential_fuses_bias_relu_and_their_gradients)
{
    /* linear(16,bias=0) keeps linear(16)'s ReLU mask for its dX, and linear(16) keeps the first's;
     * the two biased layers sum their bias gradients in their weight GEMMs. */
    static const int train[DP_EPILOGUES] = {[DP_EPILOGUE_BIAS] = 1, [DP_EPILOGUE_RELU_MASK] = 2,
                                            [DP_EPILOGUE_DRELU] = 2, [DP_EPILOGUE_BIAS_GRAD] = 2};
    /* A later micro-batch adds into db, which the epilogue would overwrite: a pass of its own. */
    static const int accumulate[DP_EPILOGUES] = {[DP_EPILOGUE_BIAS] = 1, [DP_EPILOGUE_RELU_MASK] = 2,
                                                 [DP_EPILOGUE_DRELU] = 2};
    static const int eval[DP_EPILOGUES] = {[DP_EPILOGUE_BIAS] = 1, [DP_EPILOGUE_RELU] = 2};
    gpu = open_gpu(DP_PRECISION_FP32, 0);
    check_model(gpu, train, eval, accumulate);
    dp_backend_close(gpu);
}
END_TEST

START_TEST(without_drelu_the_relu_backward_stays_a_pass_of_its_own)
{
    if (!bitwise)
        return; /* FAKECUDA_LT_DECLINE plays a cuBLASLt without DRELU */
    setenv("FAKECUDA_LT_DECLINE", "drelu", 1);
    gpu = open_gpu(DP_PRECISION_FP32, 0);
    unsetenv("FAKECUDA_LT_DECLINE");
    ck_assert_int_ne(dp_backend_require(gpu, dp_epilogue_ops[DP_EPILOGUE_DRELU], DP_DTYPE_F32), 0);
    static const int train[DP_EPILOGUES] = {[DP_EPILOGUE_BIAS] = 1, [DP_EPILOGUE_RELU] = 2,
                                            [DP_EPILOGUE_BIAS_GRAD] = 2};
    static const int accumulate[DP_EPILOGUES] = {[DP_EPILOGUE_BIAS] = 1, [DP_EPILOGUE_RELU] = 2};
    static const int eval[DP_EPILOGUES] = {[DP_EPILOGUE_BIAS] = 1, [DP_EPILOGUE_RELU] = 2};
    check_model(gpu, train, eval, accumulate);
    dp_backend_close(gpu);
}
END_TEST

START_TEST(fuse_off_calls_no_fused_gemm)
{
    static const int none[DP_EPILOGUES] = {0};
    gpu = open_gpu(DP_PRECISION_FP32, 1);
    check_model(gpu, none, none, none);
    dp_backend_close(gpu);
}
END_TEST

/* At bf16 SPEC's two hidden layers write bf16 activations, which the next Linear reads as its
 * input copy (the logits stay FP32): their outputs take 2 bytes a value, not 4, and the layers
 * after them keep no copy of their input, but the layer writing one with a bias keeps its bias's
 * copy; the first, without bias, gets its output gradient in bf16 from the second's
 * input-gradient GEMM and keeps no dY copy. Copies are DP_GEMM_OPERAND_ALIGN-aligned runs of
 * bf16 values (128 a run). The model trains within bf16's tolerance of FP32. */
static size_t activation_bytes_after_a_pass(const dp_backend *be, float **out, float **grads, size_t *params)
{
    size_t before = dp_memory_usage_now().bytes[DP_MEM_ACTIVATIONS];
    dp_model m;
    build(&m, be);
    pass(&m, be, 1, 0, out, grads);
    size_t bytes = dp_memory_usage_now().bytes[DP_MEM_ACTIVATIONS] - before;
    float *eval_out, *eval_grads;
    pass(&m, be, 0, 0, &eval_out, &eval_grads); /* evaluation writes and reads the same bf16 activations */
    double error = dp_test_relative_error(eval_out, *out, (size_t)M_ROWS * 3);
    /* on a GPU the ReLU epilogue without the mask may be another kernel, whose bits bf16 rounds */
    ck_assert_msg(error < (bitwise ? 1e-7 : 2e-2), "evaluation's output differs from training's by %g", error);
    free(eval_out);
    free(eval_grads);
    *params = dp_params_floats(&m.params);
    dp_model_free(&m);
    return bytes;
}

START_TEST(a_bf16_model_holds_bf16_activations_where_only_a_gemm_reads_them)
{
    const dp_backend *fp32 = open_gpu(DP_PRECISION_FP32, 0);
    gpu = open_gpu(DP_PRECISION_BF16, 0);
    float *out32, *grads32, *out16, *grads16;
    size_t n;
    size_t bytes32 = activation_bytes_after_a_pass(fp32, &out32, &grads32, &n);
    size_t bytes16 = activation_bytes_after_a_pass(gpu, &out16, &grads16, &n);
    /* copies, in runs of 128 values: layer 0 X 96 -> 128, W 128 (dY bf16); layer 2 (bf16 in)
     * W 256, dY 256, bias 16 -> 128; layer 4 (bf16 in) W 48 -> 128, dY 36 -> 128 */
    size_t copies = 2 * (128 + 128 + 256 + 256 + 128 + 128 + 128);
    size_t saved = 2 * (size_t)M_ROWS * 16 * 2; /* two [12, 16] outputs at 2 bytes a value, not 4 */
    ck_assert_msg(bytes16 == bytes32 - saved + copies, "bf16 activations: %zu bytes, expected %zu (FP32's %zu less "
                  "%zu for the bf16 outputs, plus %zu of copies)", bytes16, bytes32 - saved + copies, bytes32, saved,
                  copies);
    double error = dp_test_relative_error(grads16, grads32, n);
    ck_assert_msg(error < 5e-2, "bf16 gradients: relative error %g against FP32", error);
    free(out32);
    free(grads32);
    free(out16);
    free(grads16);
    dp_backend_close(gpu);
    dp_backend_close(fp32);
}
END_TEST

int main(int argc, char **argv)
{
    int rank, size;
    dp_test_mpi_init(&argc, &argv, &rank, &size);
    if (dp_backend_gpu_count() == 0) {
        printf("test_epilogues: no CUDA GPU visible (or dptrain built without CUDA): skipped\n");
        MPI_Finalize();
        return EXIT_SKIP;
    }
    cpu = dp_backend_cpu();
    dp_backend_cpu_set_threads(1, NULL);
    bitwise = getenv("FAKECUDA_DEVICES") != NULL;
    Suite *s = suite_create("epilogues");
    TCase *ops = tcase_create("fused GEMMs");
    tcase_set_timeout(ops, 120);
    tcase_add_test(ops, each_epilogue_equals_its_unfused_passes_at_every_precision);
    tcase_add_test(ops, the_cpu_and_fuse_off_decline_every_epilogue);
    tcase_add_test(ops, a_sequential_fuses_bias_relu_and_their_gradients);
    tcase_add_test(ops, without_drelu_the_relu_backward_stays_a_pass_of_its_own);
    tcase_add_test(ops, fuse_off_calls_no_fused_gemm);
    tcase_add_test(ops, a_bf16_output_is_the_fp32_output_rounded);
    tcase_add_test(ops, a_bf16_model_holds_bf16_activations_where_only_a_gemm_reads_them);
    suite_add_tcase(s, ops);
    int failed = dp_test_run_mpi_suite(s);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
