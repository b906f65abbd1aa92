/* The backend test table (tests/test_backend_ops.c), in the spirit of ggml's test-backend-ops:
 * every operation of dp_backend, on every backend the process has, at several shapes and
 * dtypes, against a reference the test computes itself in double precision.
 *
 * A case's operation (op_impl) has three parts: `prepare` declares its operands in order and
 * fills the inputs from the run's seeded generator (so every backend sees the same values);
 * `run` calls the backend on the operands' copies in backend memory; `reference` computes the
 * outputs on the host copies, independently of src/backend (double arithmetic, rounded to
 * float where the operation's documented formula rounds). The harness (harness.c) uploads,
 * runs, downloads and compares. */
#ifndef DP_TESTS_OP_TABLE_H
#define DP_TESTS_OP_TABLE_H

#include "dp/backend.h"
#include "dp/rng.h"

#include <stddef.h>
#include <stdint.h>

/* The element types of the operands a row computes in. Today every floating-point operation is
 * f32 (with int32 labels and index rows, and double totals as the operations declare); bf16
 * rows join the table when dp_backend takes a dtype. */
typedef enum op_dtype { OP_DTYPE_F32, OP_DTYPE_I32 } op_dtype;

typedef enum op_type { OP_F32, OP_F64, OP_I32, OP_INDEX, OP_U64 } op_type;

/* A case's size: a [rows, cols] matrix (or rows * cols elements), inner is a GEMM's k. */
typedef struct op_shape {
    int rows, cols, inner;
} op_shape;

/* How an output must agree with the first backend's (the CPU on one thread), beyond the
 * reference's tolerance. */
typedef enum op_agreement {
    SAME_BITS_EVERYWHERE, /* kernel_math.h's promise for elementwise results: any backend, any threads */
    SAME_BITS_ON_CPU,     /* sums in a fixed order on the CPU, whatever its threads; a GPU adds in a tree */
    REFERENCE_ONLY,       /* BLAS: its blocking depends on threads and device */
} op_agreement;

/* |got - want| <= abs + rel |want| + per_term * scale, where scale is what the reference
 * gives for a sum (its terms times the sum of their magnitudes); all 0: the same bits.
 * Non-finite references must be matched exactly (any NaN as any NaN). */
typedef struct op_tolerance {
    double rel, abs, per_term;
} op_tolerance;

typedef enum op_fill {
    FILL_FINITE,   /* uniform in [-scale, scale] */
    FILL_HOSTILE,  /* the same, a fifth of the values NaN, +-Inf, +-0, a subnormal, FLT_MAX, ... */
    FILL_POSITIVE, /* uniform in [scale / 2, scale] (variances, inverse deviations) */
} op_fill;

typedef struct op_operand {
    op_type type;
    size_t count;
    int output;            /* downloaded and compared after the run */
    int exact;             /* an output compared bit for bit whatever the row's tolerance */
    op_agreement agreement;
    void *host;            /* the inputs; an output's value before the run, then the reference's */
    double *scale;         /* per element, for per_term (NULL: 0) */
    void *device;          /* the copy in backend memory */
    void *got;             /* an output as the backend left it */
} op_operand;

enum { OP_MAX_OPERANDS = 8 };

typedef struct op_run {
    op_shape shape;
    int param; /* the row's variant (relu on/off, accumulate, beta, ...) */
    dp_rng rng;
    int count;
    op_operand arg[OP_MAX_OPERANDS];
} op_run;

typedef struct op_impl {
    void (*prepare)(op_run *r);
    void (*run)(const dp_backend *be, op_run *r);
    void (*reference)(op_run *r);
} op_impl;

/* One row of the table. shapes ends with a rows of -1. */
typedef struct op_case {
    const char *op;      /* the dp_backend member */
    const char *variant; /* what param selects */
    op_dtype dtype;
    int param;
    const op_shape *shapes;
    op_tolerance tol;
    const op_impl *impl;
} op_case;

/* A backend of the process as the table runs it: the CPU with one instruction set's loops at
 * a thread count, or a device. */
typedef struct op_backend {
    char label[48];
    const dp_backend *be;
    int on_cpu;
    const char *cpu_isa; /* "generic", "avx2", "avx512" */
    int cpu_threads;
    void (*use)(const struct op_backend *b); /* called before each run: the CPU's settings */
} op_backend;

/* Runs c at every shape on each of the backends (the first one the CPU with one thread) and
 * fails naming the row, shape, backend and element of the first disagreement. */
void op_check_case(const op_case *c, const op_backend *backends, int count);

/* ---- for prepare: operands in the order run and reference address them ---- */

void *op_input(op_run *r, op_type type, size_t count);
void *op_output(op_run *r, op_type type, size_t count, op_agreement agreement);
float *op_fill_f32(float *x, size_t n, op_fill fill, float scale, dp_rng *rng);
/* A float input, or an output holding values before the run, of n values filled so. */
float *op_input_f32(op_run *r, size_t n, op_fill fill, float scale);
float *op_output_f32(op_run *r, size_t n, op_fill fill, float scale, op_agreement agreement);
/* An output the reference fills with per-element magnitudes for the row's per_term. */
double *op_scaled(op_run *r, int index);

static inline size_t op_elements(const op_run *r)
{
    return (size_t)r->shape.rows * (size_t)r->shape.cols;
}

#define OP_HOST(r, i) ((r)->arg[i].host)
#define OP_DEV(r, i) ((r)->arg[i].device)

/* Correctly rounded float arithmetic written as double arithmetic rounded once: for +, -, *,
 * / and sqrt of floats, double's 53 bits make the double rounding harmless. */
static inline float op_round(double v)
{
    return (float)v;
}

/* ---- the operations (one file per family) ---- */

extern const op_impl op_bias_act_forward, op_relu_forward, op_relu_backward, op_multiply, op_multiply_in_place,
    op_accumulate, op_dropout_forward;
extern const op_impl op_zero, op_copies, op_gather_rows;
extern const op_impl op_bias_grad, op_column_sums;
extern const op_impl op_bn_normalize, op_bn_backward_input, op_bn_param_grads, op_bn_update_running,
    op_inverse_std, op_bn_channel_sums, op_bn_batch_stats, op_bn_means, op_bn_spread;
extern const op_impl op_softmax_xent, op_mse, op_count_nonfinite, op_sum_squares;
extern const op_impl op_sgd_step, op_adamw_step;
extern const op_impl op_gemm;
extern const op_impl op_im2col, op_col2im, op_swap_axes, op_pool_forward, op_pool_backward;

#endif
