/* The CPU backend: CBLAS sgemm for the linear layers, plain loops for the rest. */
#include "config.h"

#include "dp/backend.h"
#include "dp/error.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int blas_threads = 1;

static void *cpu_alloc(size_t bytes, const char *what)
{
    return dp_alloc(bytes, what);
}

static void cpu_free(void *ptr)
{
    free(ptr);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_zero(float *x, size_t n)
{
    if (n)
        memset(x, 0, n * sizeof *x);
}

static void cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha,
                     const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m == 0 || n == 0)
        return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void cpu_bias_act_forward(float *y, const float *bias, int rows, int cols, int relu)
{
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        for (int c = 0; c < cols; c++) {
            float v = row[c] + bias[c];
            row[c] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

static void cpu_relu_backward(float *dy, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (y[i] <= 0.0f)
            dy[i] = 0.0f;
}

static void cpu_bias_grad(const float *dy, int rows, int cols, float *db)
{
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * cols;
        for (int c = 0; c < cols; c++)
            db[c] += row[c];
    }
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void cpu_softmax_xent(const float *logits, const int32_t *labels, int rows, int cols,
                             float *dlogits, double *loss_sum, long *correct)
{
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * cols;
        int label = labels[r];
        int best = argmax(z, cols);
        /* Subtracting the max keeps exp() finite for any logits. */
        double sum = 0.0;
        for (int c = 0; c < cols; c++)
            sum += exp((double)z[c] - z[best]);
        *loss_sum += log(sum) - ((double)z[label] - z[best]);
        *correct += best == label;
        if (dlogits) {
            float *d = dlogits + (size_t)r * cols;
            for (int c = 0; c < cols; c++)
                d[c] = (float)(exp((double)z[c] - z[best]) / sum) - (c == label ? 1.0f : 0.0f);
        }
    }
}

static void cpu_mse(const float *pred, const float *targets, int rows, int cols,
                    float *dpred, double *loss_sum)
{
    size_t n = (size_t)rows * cols;
    double squares = 0.0;
    for (size_t i = 0; i < n; i++) {
        float diff = pred[i] - targets[i];
        squares += (double)diff * diff;
        if (dpred)
            dpred[i] = 2.0f * diff / (float)cols;
    }
    *loss_sum += squares / cols;
}

static void cpu_scale(float *x, size_t n, float alpha)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
}

static size_t cpu_count_nonfinite(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isfinite(x[i]);
    return bad;
}

static void cpu_sgd_update(float *params, const float *grads, float *velocity, size_t n,
                           float lr, float momentum, float weight_decay)
{
    for (size_t i = 0; i < n; i++) {
        float d = grads[i] + weight_decay * params[i];
        if (momentum != 0.0f) {
            velocity[i] = momentum * velocity[i] + d;
            d = velocity[i];
        }
        params[i] -= lr * d;
    }
}

static void cpu_gather_rows(void *dst, const void *src, const size_t *index, int rows, int width)
{
    size_t row_bytes = (size_t)width * sizeof(uint32_t);
    for (int r = 0; r < rows; r++)
        memcpy((char *)dst + (size_t)r * row_bytes, (const char *)src + index[r] * row_bytes, row_bytes);
}

/* Every operation has finished when it returns. */
static void cpu_synchronize(void)
{
}

static const char *cpu_describe(void)
{
    static char text[64];
    snprintf(text, sizeof text, "cpu (%d BLAS thread%s per rank)", blas_threads,
             blas_threads == 1 ? "" : "s");
    return text;
}

static const dp_backend cpu_backend = {
    .name = "cpu",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_host = cpu_alloc,
    .free_host = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .gemm = cpu_gemm,
    .bias_act_forward = cpu_bias_act_forward,
    .relu_backward = cpu_relu_backward,
    .bias_grad = cpu_bias_grad,
    .softmax_xent = cpu_softmax_xent,
    .mse = cpu_mse,
    .scale = cpu_scale,
    .count_nonfinite = cpu_count_nonfinite,
    .sgd_update = cpu_sgd_update,
    .gather_rows = cpu_gather_rows,
    .synchronize = cpu_synchronize,
    .describe = cpu_describe,
};

const dp_backend *dp_backend_cpu(void)
{
    return &cpu_backend;
}

void dp_backend_cpu_set_threads(int threads)
{
    blas_threads = threads;
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(threads);
#endif
}
