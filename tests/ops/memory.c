/* The operations that move bytes: zero and the copies through page-locked host memory (alloc_host, download, upload). */
#include "dp/error.h"
#include "tests/ops/op_table.h"

#include <check.h>
#include <string.h>

static void zero_prepare(op_run *r)
{
    op_output_f32(r, op_elements(r), FILL_HOSTILE, 1.0f, SAME_BITS_EVERYWHERE);
}

static void zero_run(const dp_backend *be, op_run *r)
{
    be->zero(be, OP_DEV(r, 0), op_elements(r));
}

static void zero_reference(op_run *r)
{
    float *x = OP_HOST(r, 0);
    for (size_t i = 0; i < op_elements(r); i++)
        x[i] = 0.0f;
}

const op_impl op_zero = {zero_prepare, zero_run, zero_reference};

/* ---- backend memory to page-locked host memory and back ---- */

static void copies_prepare(op_run *r)
{
    op_input_f32(r, op_elements(r), FILL_HOSTILE, 1.0f);
    op_output(r, OP_F32, op_elements(r), SAME_BITS_EVERYWHERE);
}

static void copies_run(const dp_backend *be, op_run *r)
{
    size_t bytes = op_elements(r) * sizeof(float);
    float *pinned = be->alloc_host(be, bytes, "a page-locked test buffer");
    ck_assert_msg(pinned != NULL, "%s", dp_last_error());
    be->download(be, pinned, OP_DEV(r, 0), bytes);
    be->upload(be, OP_DEV(r, 1), pinned, bytes);
    be->free_host(be, pinned);
}

static void copies_reference(op_run *r)
{
    memcpy(OP_HOST(r, 1), OP_HOST(r, 0), op_elements(r) * sizeof(float));
}

const op_impl op_copies = {copies_prepare, copies_run, copies_reference};

/* ---- gather_rows: dst [rows, cols] from rows of src [2 rows + 3, cols] picked by an index
 * with repeats, the first and the last row among them; param 0 floats (NaN payloads kept),
 * 1 int32 words (labels) ---- */

static size_t gather_source_rows(const op_run *r)
{
    return 2 * (size_t)r->shape.rows + 3;
}

static void gather_prepare(op_run *r)
{
    size_t words = gather_source_rows(r) * (size_t)r->shape.cols;
    if (r->param == 0) {
        op_input_f32(r, words, FILL_HOSTILE, 4.0f);
    } else {
        int32_t *src = op_input(r, OP_I32, words);
        for (size_t i = 0; i < words; i++)
            src[i] = (int32_t)dp_rng_next(&r->rng);
    }
    int32_t *index = op_input(r, OP_I32, (size_t)r->shape.rows);
    for (int i = 0; i < r->shape.rows; i++)
        index[i] = (int32_t)dp_rng_below(&r->rng, gather_source_rows(r));
    if (r->shape.rows > 1) {
        index[0] = (int32_t)gather_source_rows(r) - 1;
        index[1] = 0;
    }
    op_output(r, r->param == 0 ? OP_F32 : OP_I32, op_elements(r), SAME_BITS_EVERYWHERE);
}

static void gather_run(const dp_backend *be, op_run *r)
{
    be->gather_rows(be, OP_DEV(r, 2), OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, r->shape.cols);
}

static void gather_reference(op_run *r)
{
    const uint32_t *src = OP_HOST(r, 0);
    const int32_t *index = OP_HOST(r, 1);
    uint32_t *dst = OP_HOST(r, 2);
    size_t cols = (size_t)r->shape.cols;
    for (size_t i = 0; i < (size_t)r->shape.rows; i++)
        for (size_t c = 0; c < cols; c++)
            dst[i * cols + c] = src[(size_t)index[i] * cols + c];
}

const op_impl op_gather_rows = {gather_prepare, gather_run, gather_reference};
