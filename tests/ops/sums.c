/* The column sums: bias_grad in float and column_sums in double. The reference adds in long
 * double; the backends' orders differ (the CPU's rows in order, whatever its threads; a GPU's
 * row lanes merged in a tree), so each result is held to the bound of a sum of `rows` terms. */
#include "tests/ops/op_table.h"

#include <math.h>

/* Sum over rows of column c of x (times other when not NULL), and the magnitudes' sum. */
static long double column_sum(const float *x, const float *other, const op_shape *s, int c, long double *magnitude)
{
    long double sum = 0.0L;
    *magnitude = 0.0L;
    for (int r = 0; r < s->rows; r++) {
        size_t i = (size_t)r * (size_t)s->cols + (size_t)c;
        long double term = other ? (long double)x[i] * other[i] : (long double)x[i];
        sum += term;
        *magnitude += fabsl(term);
    }
    return sum;
}

/* Finite values, except row 1 of the first columns: NaN, +-Inf, +-0 and subnormals, one a
 * column (a special in every column would leave no finite sum to compare). */
static const float *sparse_specials(float *x, const op_shape *s, float scale, dp_rng *rng)
{
    static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -3e-39f, 1e-45f};
    op_fill_f32(x, (size_t)s->rows * (size_t)s->cols, FILL_FINITE, scale, rng);
    for (int c = 0; s->rows > 1 && c < s->cols && c < (int)(sizeof specials / sizeof *specials); c++)
        x[(size_t)s->cols + (size_t)c] = specials[c];
    return x;
}

/* ---- bias_grad: param 1 accumulates onto db ---- */

static void bias_grad_prepare(op_run *r)
{
    size_t cols = (size_t)r->shape.cols;
    sparse_specials(op_input(r, OP_F32, op_elements(r)), &r->shape, 1.0f, &r->rng);
    op_output_f32(r, cols, FILL_FINITE, 1.0f, SAME_BITS_ON_CPU);
}

static void bias_grad_run(const dp_backend *be, op_run *r)
{
    be->bias_grad(be, OP_DEV(r, 0), r->shape.rows, r->shape.cols, OP_DEV(r, 1), r->param);
}

static void bias_grad_reference(op_run *r)
{
    float *db = OP_HOST(r, 1);
    double *scale = op_scaled(r, 1);
    for (int c = 0; c < r->shape.cols; c++) {
        long double magnitude, sum = column_sum(OP_HOST(r, 0), NULL, &r->shape, c, &magnitude);
        if (r->param) {
            sum += db[c];
            magnitude += fabsf(db[c]);
        }
        db[c] = (float)sum;
        scale[c] = (double)((r->shape.rows + 1) * magnitude);
    }
}

const op_impl op_bias_grad = {bias_grad_prepare, bias_grad_run, bias_grad_reference};

/* ---- column_sums: out[c] = sum of a, out[cols + c] = sum of a b ---- */

static void column_sums_prepare(op_run *r)
{
    sparse_specials(op_input(r, OP_F32, op_elements(r)), &r->shape, 2.0f, &r->rng);
    sparse_specials(op_input(r, OP_F32, op_elements(r)), &r->shape, 1.0f, &r->rng);
    op_output(r, OP_F64, 2 * (size_t)r->shape.cols, SAME_BITS_ON_CPU);
}

static void column_sums_run(const dp_backend *be, op_run *r)
{
    be->column_sums(be, OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, r->shape.cols, OP_DEV(r, 2));
}

static void column_sums_reference(op_run *r)
{
    double *out = OP_HOST(r, 2), *scale = op_scaled(r, 2);
    size_t cols = (size_t)r->shape.cols;
    for (int c = 0; c < r->shape.cols; c++) {
        long double magnitude;
        out[c] = (double)column_sum(OP_HOST(r, 0), NULL, &r->shape, c, &magnitude);
        scale[c] = (double)((r->shape.rows + 1) * magnitude);
        out[cols + c] = (double)column_sum(OP_HOST(r, 0), OP_HOST(r, 1), &r->shape, c, &magnitude);
        scale[cols + c] = (double)((r->shape.rows + 1) * magnitude);
    }
}

const op_impl op_column_sums = {column_sums_prepare, column_sums_run, column_sums_reference};
