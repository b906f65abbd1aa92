/* dp_gemm_bench: what the backend's GEMMs reach on their own, for the shapes one training step
 * of a model issues. It runs the model's own forward and backward through a backend whose gemm
 * times each call alone (synchronised, repeated), so the shapes are exactly dp_worker's; the
 * sum over a step is the step time a GEMM-bound trainer would approach. */
#include "dp/backend.h"
#include "dp/blas.h"
#include "dp/error.h"
#include "dp/nn.h"
#include "dp/options.h"
#include "dp/rng.h"
#include "src/train/option_values.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_options {
    char layers[256];
    dp_model_spec spec;
    int batch, repeat, threads;
    dp_precision precision;
    dp_device device;
} bench_options;

static const dp_backend *real;
static int repeat, timing, gemm_count;
static double total_ms, total_flop;

/* What a GEMM reads and writes: floats, copies the Linear rounded once (gemm_rounded), or those
 * with a bf16 output (gemm_rounded_bf16). */
enum { FLOATS, ROUNDED, ROUNDED_TO_BF16 };

/* One GEMM of the step, plain (epilogue NULL) or with the epilogue dp_worker fuses into it. */
static void real_gemm(int rounded, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a, int lda,
                      const void *b, int ldb, float beta, void *c, int ldc, const dp_gemm_epilogue *epilogue)
{
    if (rounded == ROUNDED_TO_BF16)
        real->gemm_rounded_bf16(real, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc, epilogue);
    else if (rounded)
        real->gemm_rounded(real, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, epilogue);
    else if (epilogue)
        real->gemm_fused(real, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, epilogue);
    else
        real->gemm(real, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Runs a GEMM, or while timing runs it `repeat` times alone and prints its line. */
static void time_gemm(int rounded, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a, int lda,
                      const void *b, int ldb, float beta, void *c, int ldc, const dp_gemm_epilogue *epilogue)
{
    if (!timing) {
        real_gemm(rounded, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, epilogue);
        return;
    }
    real->synchronize(real);
    double started = MPI_Wtime();
    for (int i = 0; i < repeat; i++)
        real_gemm(rounded, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, epilogue);
    real->synchronize(real);
    double ms = 1e3 * (MPI_Wtime() - started) / repeat, flop = 2.0 * m * n * k;
    printf("  %-4d %c %c  %7d %7d %7d  %9.3f  %8.2f%s%s\n", ++gemm_count, trans_a ? 'T' : 'N',
           trans_b ? 'T' : 'N', m, n, k, ms, flop / ms * 1e-9, epilogue ? "  + " : "",
           epilogue ? dp_epilogue_ops[epilogue->kind] : "");
    total_ms += ms;
    total_flop += flop;
}

/* be is the timed copy of real: its state is real's, so real's operations serve it. */
static void timed_gemm(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    (void)be;
    time_gemm(FLOATS, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL);
}

/* The fused GEMMs (cuBLASLt epilogues) are the step's GEMMs too: timed with their epilogue. */
static void timed_gemm_fused(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                             const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc,
                             const dp_gemm_epilogue *epilogue)
{
    (void)be;
    time_gemm(FLOATS, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, epilogue);
}

/* At --precision bf16 the Linear's GEMMs read operands it rounded once: timed on those copies
 * (the rounding itself is outside the GEMM's time, as it is outside the GEMM). */
static void timed_gemm_rounded(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                               const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc,
                               const dp_gemm_epilogue *epilogue)
{
    (void)be;
    time_gemm(ROUNDED, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, epilogue);
}

/* ...and where a Linear's output is a bf16 activation, the GEMM writing it. */
static void timed_gemm_rounded_bf16(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                                    const void *a, int lda, const void *b, int ldb, void *c, int ldc,
                                    const dp_gemm_epilogue *epilogue)
{
    (void)be;
    time_gemm(ROUNDED_TO_BF16, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, epilogue);
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: dp_gemm_bench --layers W0,W1,... --batch ROWS [--device cpu|cuda] [--precision fp32|tf32|bf16] [--tf32] [--repeat N] [--threads T]\n"
                 "Times each GEMM of one training step of the MLP on ROWS samples alone (forward\n"
                 "X W^T, backward dY^T X and dY W), through the backend dp_worker uses, as the\n"
                 "mean of N calls after a warm-up step (on the CPU with T BLAS threads, default: as\n"
                 "dp_worker's --threads; --precision as dp_worker's, --tf32 its alias). Prints one line per GEMM and\n"
                 "gemm_ms_per_step=MS gemm_gflop_per_step=GFLOP.\n");
}

static int parse(int argc, char **argv, bench_options *o)
{
    static const struct option longopts[] = {
        {"layers", required_argument, NULL, 'l'}, {"batch", required_argument, NULL, 'b'},
        {"device", required_argument, NULL, 'd'}, {"tf32", no_argument, NULL, 't'},
        {"precision", required_argument, NULL, 'p'},
        {"repeat", required_argument, NULL, 'r'}, {"threads", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    *o = (bench_options){.batch = 0, .repeat = 20, .device = DP_DEVICE_CUDA};
    opterr = 0;
    for (int id; (id = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (id == 'l')
            snprintf(o->layers, sizeof o->layers, "%s", optarg);
        else if (id == 'b' || id == 'r' || id == 'T') {
            char *end;
            long v = strtol(optarg, &end, 10);
            const char *name = id == 'b' ? "batch" : id == 'r' ? "repeat" : "threads";
            if (*end || v < 1 || v > 1 << 24)
                return dp_fail(DP_EINVAL, "--%s '%s': must be an integer from 1 to %d", name, optarg, 1 << 24);
            *(id == 'b' ? &o->batch : id == 'r' ? &o->repeat : &o->threads) = (int)v;
        } else if (id == 'd' && (strcmp(optarg, "cpu") == 0 || strcmp(optarg, "cuda") == 0))
            o->device = strcmp(optarg, "cpu") == 0 ? DP_DEVICE_CPU : DP_DEVICE_CUDA;
        else if (id == 't')
            o->precision = DP_PRECISION_TF32;
        else if (id == 'p') {
            int choice, status = dp_option_choice("precision", optarg, dp_precision_names, DP_PRECISION_BF16 + 1,
                                                  &choice);
            if (status)
                return status;
            o->precision = (dp_precision)choice;
        }
        else if (id == 'h') {
            usage(stdout);
            return 1;
        } else
            return dp_fail(DP_EINVAL, "%s: unknown option, or a bad or missing value (see --help)", argv[optind - 1]);
    }
    if (!o->layers[0] || !o->batch)
        return dp_fail(DP_EINVAL, "--layers and --batch are required (see --help)");
    return dp_model_spec_from_layers(o->layers, &o->spec);
}

/* Uploads host_values, count floats, into dev; frees host_values. */
static int upload_and_free(float *dev, float *host_values, size_t count)
{
    if (!host_values)
        return DP_ENOMEM;
    real->upload(real, dev, host_values, count * sizeof(float));
    free(host_values);
    return 0;
}

/* count floats uniform in [-1, 1], or NULL. */
static float *uniform_values(size_t count, uint64_t seed)
{
    float *host = dp_alloc(count * sizeof(float), "the benchmark's inputs");
    dp_rng rng;
    dp_rng_seed(&rng, seed);
    for (size_t i = 0; host && i < count; i++)
        host[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    return host;
}

/* nn.Linear's initialisation, so activations keep their scale through wide layers. */
static float *initial_params(const dp_model *model)
{
    size_t params = dp_params_floats(&model->params), buffers = dp_params_floats(&model->buffers);
    float *host = dp_alloc(params * sizeof(float), "the benchmark's parameters");
    float *host_buffers = dp_alloc((buffers + 1) * sizeof(float), "the benchmark's buffers");
    if (host && host_buffers)
        dp_model_init(model, 42, host, host_buffers, model->counters);
    free(host_buffers);
    return host;
}

/* One training step's forward, loss and backward. */
static void one_step(dp_model *model, const float *x, const float *targets, int rows, double *totals)
{
    dp_nn_context ctx = {.be = model->be, .training = 1};
    const float *out;
    if (dp_model_forward(model, &ctx, x, rows, &out) == 0) {
        dp_model_loss(model, DP_LOSS_MSE, out, NULL, targets, rows, model->delta[0], totals);
        dp_model_backward(model, &ctx, model->delta[0], rows, NULL);
    }
}

/* A warm-up step, then one step with every GEMM timed alone. */
static void time_one_step(dp_model *model, const float *x, const float *targets, int rows, double *totals)
{
    one_step(model, x, targets, rows, totals);
    printf("  gemm op    %7s %7s %7s  %9s  %8s\n", "m", "n", "k", "ms", "TFLOP/s");
    timing = 1;
    one_step(model, x, targets, rows, totals);
    timing = 0;
    printf("total: %d GEMMs, %.1f GFLOP in %.3f ms per step = %.2f TFLOP/s\n", gemm_count,
           total_flop * 1e-9, total_ms, total_flop / total_ms * 1e-9);
    printf("gemm_ms_per_step=%.4f gemm_gflop_per_step=%.6f\n", total_ms, total_flop * 1e-9);
}

static int run(const bench_options *o)
{
    dp_backend timed = *real;
    timed.gemm = timed_gemm;
    if (real->gemm_fused)
        timed.gemm_fused = timed_gemm_fused;
    if (real->gemm_rounded)
        timed.gemm_rounded = timed_gemm_rounded;
    if (real->gemm_rounded_bf16)
        timed.gemm_rounded_bf16 = timed_gemm_rounded_bf16;
    dp_model model;
    int status = dp_model_create(&model, &timed, &o->spec, o->spec.inputs, o->batch);
    if (status)
        return status;
    size_t inputs = (size_t)o->batch * (size_t)model.inputs, outputs = (size_t)o->batch * (size_t)model.outputs;
    float *x = real->alloc(real, inputs * sizeof(float), DP_MEM_ACTIVATIONS, "the inputs");
    float *targets = real->alloc(real, outputs * sizeof(float), DP_MEM_ACTIVATIONS, "the targets");
    double *totals = real->alloc(real, 2 * sizeof(double), DP_MEM_ACTIVATIONS, "the loss totals");
    status = x && targets && totals ? 0 : DP_ENOMEM;
    if (!status)
        status = upload_and_free(x, uniform_values(inputs, 1), inputs);
    if (!status)
        status = upload_and_free(targets, uniform_values(outputs, 2), outputs);
    if (!status)
        status = upload_and_free(model.weights, initial_params(&model), dp_params_floats(&model.params));
    if (!status)
        time_one_step(&model, x, targets, o->batch, totals);
    real->free(real, x);
    real->free(real, targets);
    real->free(real, totals);
    dp_model_free(&model);
    return status;
}

int main(int argc, char **argv)
{
    /* OpenBLAS's kernels are chosen when it loads: a generic core is corrected by running again. */
    dp_blas_choose_core(argv);
    MPI_Init(&argc, &argv);
    bench_options o;
    int status = parse(argc, argv, &o);
    if (status == 0) {
        dp_backend_request request = {.device = o.device, .share_gpu = 1, .precision = o.precision, .local_size = 1};
        repeat = o.repeat;
        char why[128] = "--threads";
        dp_backend_cpu_set_threads(o.threads ? o.threads : dp_backend_cpu_default_threads(1, why, sizeof why), why);
        status = dp_backend_open(&request, &real);
        if (!status) {
            printf("dp_gemm_bench: MLP %s on %d rows, backend %s; each GEMM alone, mean of %d calls\n",
                   o.layers, o.batch, real->describe(real), o.repeat);
            status = run(&o);
            dp_backend_close(real);
        }
    }
    if (status < 0)
        fprintf(stderr, "dp_gemm_bench: error: %s\n", dp_last_error());
    MPI_Finalize();
    return status < 0 ? (status == DP_EINVAL ? 2 : 1) : 0;
}
