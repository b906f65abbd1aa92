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
