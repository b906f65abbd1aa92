/* The losses and the non-finite count: softmax cross-entropy (training, eval without the
 * gradient, and rows holding NaN, infinities and ties, where one argmax rule decides), MSE,
 * and count_nonfinite. Totals are added onto what the buffer holds. */
#include "tests/ops/op_table.h"

#include <math.h>

/* The argmax rule of include/dp/backend.h's softmax_xent (NumPy's and PyTorch's): NaN beats
 * every number, and among equals the first index wins. */
static int row_argmax(const float *z, int cols)
{
    int best = 0;
    for (int c = 1; c < cols; c++) {
        int nan_c = isnan(z[c]), nan_best = isnan(z[best]);
        if (nan_c != nan_best ? nan_c : !nan_c && z[c] > z[best])
            best = c;
    }
    return best;
}

/* ---- softmax_xent: param 0 trains, 1 evaluates (no gradient), 2 trains on hostile logits ---- */

static void softmax_prepare(op_run *r)
{
    size_t n = op_elements(r);
    float *logits = op_input_f32(r, n, r->param == 2 ? FILL_HOSTILE : FILL_FINITE, 8.0f);
    if (r->param == 2)
        for (size_t i = 0; i < n; i += 3)
            logits[i] = roundf(logits[i] / 4.0f); /* ties */
    int32_t *labels = op_input(r, OP_I32, (size_t)r->shape.rows);
    for (int i = 0; i < r->shape.rows; i++)
        labels[i] = (int32_t)(dp_rng_uniform(&r->rng) * (float)r->shape.cols) % r->shape.cols;
    op_output(r, OP_F32, n, SAME_BITS_ON_CPU);
    double *totals = op_output(r, OP_F64, 2, SAME_BITS_ON_CPU);
    totals[0] = 1.5;
    totals[1] = 2.0;
}

static void softmax_run(const dp_backend *be, op_run *r)
{
    be->softmax_xent(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, r->shape.cols, r->param == 1 ? NULL : OP_DEV(r, 2),
                     OP_DEV(r, 3));
}

static void softmax_reference(op_run *r)
{
    const float *logits = OP_HOST(r, 0);
    const int32_t *labels = OP_HOST(r, 1);
    float *dlogits = OP_HOST(r, 2);
    double *totals = OP_HOST(r, 3);
    size_t cols = (size_t)r->shape.cols;
    for (int row = 0; row < r->shape.rows; row++) {
        const float *z = logits + row * cols;
        int best = row_argmax(z, r->shape.cols), label = labels[row];
        double top = z[best], sum = 0.0;
        for (size_t c = 0; c < cols; c++)
            sum += exp(z[c] - top);
        totals[0] += log(sum) - (z[label] - top);
        totals[1] += best == label;
        for (size_t c = 0; c < cols && r->param != 1; c++)
            dlogits[row * cols + c] = op_round((double)(float)(exp(z[c] - top) / sum) - ((int)c == label));
    }
}

const op_impl op_softmax_xent = {softmax_prepare, softmax_run, softmax_reference};

/* ---- mse: param 0 with the gradient, 1 without ---- */

static void mse_prepare(op_run *r)
{
    size_t n = op_elements(r);
    op_input_f32(r, n, FILL_FINITE, 2.0f);
    op_input_f32(r, n, FILL_FINITE, 2.0f);
    op_output(r, OP_F32, n, SAME_BITS_EVERYWHERE);
    double *totals = op_output(r, OP_F64, 2, SAME_BITS_ON_CPU);
    totals[0] = 1.5;
}

static void mse_run(const dp_backend *be, op_run *r)
{
    be->mse(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, r->shape.cols, r->param ? NULL : OP_DEV(r, 2), OP_DEV(r, 3));
}

/* The loss is held to the bound of a sum of n positive terms (the GPU adds in a tree). */
static void mse_reference(op_run *r)
{
    const float *pred = OP_HOST(r, 0), *targets = OP_HOST(r, 1);
    float *dpred = OP_HOST(r, 2);
    double *totals = OP_HOST(r, 3), *scale = op_scaled(r, 3);
    long double squares = 0.0L;
    for (size_t i = 0; i < op_elements(r); i++) {
        float diff = op_round((double)pred[i] - targets[i]);
        squares += (long double)diff * diff;
        if (!r->param)
            dpred[i] = op_round((double)op_round(2.0 * diff) / r->shape.cols);
    }
    double loss = r->shape.cols ? (double)(squares / r->shape.cols) : 0.0;
    scale[0] = (double)(op_elements(r) + 2) * (totals[0] + loss);
    totals[0] += loss;
}

const op_impl op_mse = {mse_prepare, mse_run, mse_reference};

/* ---- count_nonfinite: the count comes back to the host; the run stores it as an output ---- */

static void count_prepare(op_run *r)
{
    op_input_f32(r, op_elements(r), FILL_HOSTILE, 1e30f);
    op_output(r, OP_INDEX, 1, SAME_BITS_EVERYWHERE);
}

static void count_run(const dp_backend *be, op_run *r)
{
    size_t count = be->count_nonfinite(be, OP_DEV(r, 0), op_elements(r));
    be->upload(be, OP_DEV(r, 1), &count, sizeof count);
}

static void count_reference(op_run *r)
{
    const float *x = OP_HOST(r, 0);
    size_t *count = OP_HOST(r, 1);
    for (size_t i = 0; i < op_elements(r); i++)
        *count += !isfinite(x[i]);
}

const op_impl op_count_nonfinite = {count_prepare, count_run, count_reference};

/* ---- sum_squares: param 0 scales by 1, param k by 1 / k (a gradient's mean over k rows) ---- */

static float squares_scale(const op_run *r)
{
    return r->param ? 1.0f / (float)r->param : 1.0f;
}

static void squares_prepare(op_run *r)
{
    op_input_f32(r, op_elements(r), FILL_FINITE, 3.0f);
    double *total = op_output(r, OP_F64, 1, SAME_BITS_ON_CPU);
    total[0] = 0.25;
}

static void squares_run(const dp_backend *be, op_run *r)
{
    be->sum_squares(be, OP_DEV(r, 0), op_elements(r), squares_scale(r), OP_DEV(r, 1));
}

/* Each term is exact (a rounded float squared in long double); the sum is held to the bound of n
 * positive terms (the GPU adds in a tree, the CPU in 64 lanes). */
static void squares_reference(op_run *r)
{
    const float *x = OP_HOST(r, 0);
    double *total = OP_HOST(r, 1), *scale = op_scaled(r, 1);
    float k = squares_scale(r);
    long double squares = 0.0L;
    for (size_t i = 0; i < op_elements(r); i++) {
        float v = op_round((double)x[i] * k);
        squares += (long double)v * v;
    }
    scale[0] = (double)(op_elements(r) + 2) * (total[0] + (double)squares);
    total[0] += (double)squares;
}

const op_impl op_sum_squares = {squares_prepare, squares_run, squares_reference};
