/* The operations that move bytes: zero, gather_rows (float features or int32 labels) and the
 * copies through page-locked host memory (alloc_host, download, upload). */
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
    be->zero(OP_DEV(r, 0), op_elements(r));
}

static void zero_reference(op_run *r)
{
    float *x = OP_HOST(r, 0);
    for (size_t i = 0; i < op_elements(r); i++)
        x[i] = 0.0f;
}

const op_impl op_zero = {zero_prepare, zero_run, zero_reference};

/* ---- gather_rows: rows of a [2 rows + 3, cols] source; param 1 gathers int32 values ---- */

static size_t source_rows(const op_run *r)
{
    return 2 * (size_t)r->shape.rows + 3;
}

static void gather_prepare(op_run *r)
{
    size_t n = source_rows(r) * (size_t)r->shape.cols;
    if (r->param) {
        int32_t *labels = op_input(r, OP_I32, n);
        for (size_t i = 0; i < n; i++)
            labels[i] = (int32_t)(dp_rng_uniform(&r->rng) * 2e9f) - 1000000000;
    } else {
        op_input_f32(r, n, FILL_HOSTILE, 1.0f);
    }
    size_t *index = op_input(r, OP_INDEX, (size_t)r->shape.rows);
    for (int i = 0; i < r->shape.rows; i++)
        index[i] = (size_t)(dp_rng_uniform(&r->rng) * (float)source_rows(r)) % source_rows(r);
    op_output(r, r->param ? OP_I32 : OP_F32, op_elements(r), SAME_BITS_EVERYWHERE);
}

static void gather_run(const dp_backend *be, op_run *r)
{
    be->gather_rows(OP_DEV(r, 2), OP_DEV(r, 0), OP_DEV(r, 1), r->shape.rows, r->shape.cols);
}

static void gather_reference(op_run *r)
{
    const size_t *index = OP_HOST(r, 1);
    size_t row_bytes = (size_t)r->shape.cols * 4;
    for (int i = 0; i < r->shape.rows; i++)
        memcpy((char *)OP_HOST(r, 2) + i * row_bytes, (const char *)OP_HOST(r, 0) + index[i] * row_bytes, row_bytes);
}

const op_impl op_gather_rows = {gather_prepare, gather_run, gather_reference};

/* ---- backend memory to page-locked host memory and back ---- */

static void copies_prepare(op_run *r)
{
    op_input_f32(r, op_elements(r), FILL_HOSTILE, 1.0f);
    op_output(r, OP_F32, op_elements(r), SAME_BITS_EVERYWHERE);
}

static void copies_run(const dp_backend *be, op_run *r)
{
    size_t bytes = op_elements(r) * sizeof(float);
    float *pinned = be->alloc_host(bytes, "a page-locked test buffer");
    ck_assert_msg(pinned != NULL, "%s", dp_last_error());
    be->download(pinned, OP_DEV(r, 0), bytes);
    be->upload(OP_DEV(r, 1), pinned, bytes);
    be->free_host(pinned);
}

static void copies_reference(op_run *r)
{
    memcpy(OP_HOST(r, 1), OP_HOST(r, 0), op_elements(r) * sizeof(float));
}

const op_impl op_copies = {copies_prepare, copies_run, copies_reference};
