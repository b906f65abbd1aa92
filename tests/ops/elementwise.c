/* The elementwise operations of the table: bias + ReLU, ReLU forward and backward, multiply (in
 * place too), accumulate and dropout, on values holding NaN, +-Inf, +-0 and subnormals. Every
 * backend must give the reference's bits (kernel_math.h's promise). */
#include "src/backend/kernel_math.h"
#include "tests/ops/op_table.h"

/* ReLU as the header states it: a negative value becomes +0; -0 and NaN pass unchanged. */
static float relu(float v)
{
    return v < 0.0f ? 0.0f : v;
}

/* ---- bias_act_forward: param bit 0 a bias, bit 1 the ReLU ---- */

static void bias_act_prepare(op_run *r)
{
    op_output_f32(r, op_elements(r), FILL_HOSTILE, 2.0f, SAME_BITS_EVERYWHERE);
    op_input_f32(r, (size_t)r->shape.cols, FILL_HOSTILE, 1.0f);
}

static void bias_act_run(const dp_backend *be, op_run *r)
{
    be->bias_act_forward(be, OP_DEV(r, 0), r->param & 1 ? OP_DEV(r, 1) : NULL, r->shape.rows, r->shape.cols,
                         r->param >> 1);
}

static void bias_act_reference(op_run *r)
{
    float *y = OP_HOST(r, 0);
    const float *bias = OP_HOST(r, 1);
    for (size_t i = 0; i < op_elements(r); i++) {
        float v = r->param & 1 ? op_round((double)y[i] + bias[i % (size_t)r->shape.cols]) : y[i];
        y[i] = r->param >> 1 ? relu(v) : v;
    }
}

const op_impl op_bias_act_forward = {bias_act_prepare, bias_act_run, bias_act_reference};

/* ---- two inputs x, other (hostile) and a result y, for the n-element operations ---- */

static void two_inputs_prepare(op_run *r)
{
    size_t n = op_elements(r);
    op_input_f32(r, n, FILL_HOSTILE, 3.0f);
    op_input_f32(r, n, FILL_HOSTILE, 1.0f);
    op_output(r, OP_F32, n, SAME_BITS_EVERYWHERE);
}

static void relu_forward_run(const dp_backend *be, op_run *r)
{
    be->relu_forward(be, OP_DEV(r, 2), OP_DEV(r, 0), op_elements(r));
}

static void relu_forward_reference(op_run *r)
{
    const float *x = OP_HOST(r, 0);
    float *y = OP_HOST(r, 2);
    for (size_t i = 0; i < op_elements(r); i++)
        y[i] = relu(x[i]);
}

const op_impl op_relu_forward = {two_inputs_prepare, relu_forward_run, relu_forward_reference};

static void multiply_run(const dp_backend *be, op_run *r)
{
    be->multiply(be, OP_DEV(r, 2), OP_DEV(r, 0), OP_DEV(r, 1), op_elements(r));
}

static void multiply_reference(op_run *r)
{
    const float *x = OP_HOST(r, 0), *mask = OP_HOST(r, 1);
    float *y = OP_HOST(r, 2);
    for (size_t i = 0; i < op_elements(r); i++)
        y[i] = op_round((double)x[i] * mask[i]);
}

const op_impl op_multiply = {two_inputs_prepare, multiply_run, multiply_reference};

/* ---- in place: y (hostile, overwritten) and x ---- */

static void in_place_prepare(op_run *r)
{
    size_t n = op_elements(r);
    op_output_f32(r, n, FILL_HOSTILE, 3.0f, SAME_BITS_EVERYWHERE);
    op_input_f32(r, n, FILL_HOSTILE, 1.0f);
}

static void multiply_in_place_run(const dp_backend *be, op_run *r)
{
    be->multiply(be, OP_DEV(r, 0), OP_DEV(r, 0), OP_DEV(r, 1), op_elements(r));
}

static void multiply_in_place_reference(op_run *r)
{
    float *y = OP_HOST(r, 0);
    const float *mask = OP_HOST(r, 1);
    for (size_t i = 0; i < op_elements(r); i++)
        y[i] = op_round((double)y[i] * mask[i]);
}

const op_impl op_multiply_in_place = {in_place_prepare, multiply_in_place_run, multiply_in_place_reference};

/* dy blocked where the ReLU's output y was <= 0 (NaN y passes dy). */
static void relu_backward_run(const dp_backend *be, op_run *r)
{
    be->relu_backward(be, OP_DEV(r, 0), OP_DEV(r, 1), op_elements(r));
}

static void relu_backward_reference(op_run *r)
{
    float *dy = OP_HOST(r, 0);
    const float *y = OP_HOST(r, 1);
    for (size_t i = 0; i < op_elements(r); i++)
        if (y[i] <= 0.0f)
            dy[i] = 0.0f;
}

const op_impl op_relu_backward = {in_place_prepare, relu_backward_run, relu_backward_reference};

/* param: 0 copies, 1 adds. */
static void accumulate_run(const dp_backend *be, op_run *r)
{
    be->accumulate(be, OP_DEV(r, 0), OP_DEV(r, 1), op_elements(r), r->param);
}

static void accumulate_reference(op_run *r)
{
    float *y = OP_HOST(r, 0);
    const float *x = OP_HOST(r, 1);
    for (size_t i = 0; i < op_elements(r); i++)
        y[i] = r->param ? op_round((double)y[i] + x[i]) : x[i];
}

const op_impl op_accumulate = {in_place_prepare, accumulate_run, accumulate_reference};

/* ---- dropout_forward: param is the drop probability in percent ---- */

/* The key, its step number at `step` (operand 3: backend memory to the op, host memory to the
 * reference). */
static dp_dropout_key dropout_key(const op_run *r, const uint64_t *step)
{
    float p = (float)r->param / 100.0f;
    return (dp_dropout_key){.seed = 9, .step = step, .first_sample = 123, .p = p, .scale = 1.0f / (1.0f - p)};
}

static void dropout_prepare(op_run *r)
{
    size_t n = op_elements(r);
    op_input_f32(r, n, FILL_HOSTILE, 2.0f);
    op_output(r, OP_F32, n, SAME_BITS_EVERYWHERE);
    op_output(r, OP_F32, n, SAME_BITS_EVERYWHERE);
    *(uint64_t *)op_input(r, OP_U64, 1) = 4;
}

static void dropout_run(const dp_backend *be, op_run *r)
{
    dp_dropout_key key = dropout_key(r, OP_DEV(r, 3));
    be->dropout_forward(be, OP_DEV(r, 1), OP_DEV(r, 0), OP_DEV(r, 2), r->shape.rows, r->shape.cols, &key);
}

/* The mask is the hash's by definition (its statistics: tests/test_kernel_math.c). */
static void dropout_reference(op_run *r)
{
    dp_dropout_key key = dropout_key(r, OP_HOST(r, 3));
    const float *x = OP_HOST(r, 0);
    float *y = OP_HOST(r, 1), *mask = OP_HOST(r, 2);
    size_t cols = (size_t)r->shape.cols;
    for (size_t i = 0; i < op_elements(r); i++) {
        mask[i] = dp_dropout_mask(&key, i / cols, i % cols);
        y[i] = op_round((double)x[i] * mask[i]);
    }
}

const op_impl op_dropout_forward = {dropout_prepare, dropout_run, dropout_reference};
