/* gemm: C = alpha op(A) op(B) + beta C, row-major, every transpose, beta 0 (C is not read: it
 * holds NaN) and beta 0.5. The reference adds in long double; each element is held to the
 * bound of a k-term float dot product, (k + 2) eps (|alpha| sum |a b| + |beta c|). */
#include "tests/ops/op_table.h"

#include <math.h>

static const float alpha = 0.75f;

static int trans_a(const op_run *r) { return r->param & 1; }
static int trans_b(const op_run *r) { return (r->param >> 1) & 1; }
static float beta(const op_run *r) { return r->param & 4 ? 0.5f : 0.0f; }

/* Leading dimensions: the stored rows' widths, at least 1 as BLAS requires. */
static int lead(int width)
{
    return width > 1 ? width : 1;
}

static void gemm_prepare(op_run *r)
{
    size_t m = (size_t)r->shape.rows, n = (size_t)r->shape.cols, k = (size_t)r->shape.inner;
    op_input_f32(r, m * k, FILL_FINITE, 1.0f);
    op_input_f32(r, k * n, FILL_FINITE, 1.0f);
    float *c = op_output_f32(r, m * n, FILL_FINITE, 1.0f, REFERENCE_ONLY);
    for (size_t i = 0; i < m * n && beta(r) == 0.0f; i++)
        c[i] = NAN;
}

static void gemm_run(const dp_backend *be, op_run *r)
{
    int m = r->shape.rows, n = r->shape.cols, k = r->shape.inner;
    be->gemm(be, trans_a(r), trans_b(r), m, n, k, alpha, OP_DEV(r, 0), lead(trans_a(r) ? m : k), OP_DEV(r, 1),
             lead(trans_b(r) ? k : n), beta(r), OP_DEV(r, 2), lead(n));
}

static void gemm_reference(op_run *r)
{
    int m = r->shape.rows, n = r->shape.cols, k = r->shape.inner;
    const float *a = OP_HOST(r, 0), *b = OP_HOST(r, 1);
    float *c = OP_HOST(r, 2);
    double *scale = op_scaled(r, 2);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            long double dot = 0.0L, magnitude = 0.0L;
            for (int p = 0; p < k; p++) {
                float x = trans_a(r) ? a[(size_t)p * m + i] : a[(size_t)i * k + p];
                float y = trans_b(r) ? b[(size_t)j * k + p] : b[(size_t)p * n + j];
                dot += (long double)x * y;
                magnitude += fabsl((long double)x * y);
            }
            size_t at = (size_t)i * n + j;
            long double before = beta(r) != 0.0f ? (long double)beta(r) * c[at] : 0.0L;
            c[at] = (float)(alpha * dot + before);
            scale[at] = (double)((k + 2) * (fabsl(alpha * magnitude) + fabsl(before)));
        }
}

const op_impl op_gemm = {gemm_prepare, gemm_run, gemm_reference};
