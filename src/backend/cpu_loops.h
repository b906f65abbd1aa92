/* The CPU backend's loops (cpu_loops.c), compiled once per instruction set, and the choice among
 * them at run time (cpu_isa.c). Every loop runs one backend operation over a part [begin, end)
 * of its rows, columns or elements, so cpu.c can hand the parts to threads; each element's
 * arithmetic is kernel_math.h's, and every part computes exactly what the whole loop would, so
 * the results are bitwise the same for any instruction set, thread count or split. */
#ifndef DP_BACKEND_CPU_LOOPS_H
#define DP_BACKEND_CPU_LOOPS_H

#include "dp/backend.h"

#include <stddef.h>

/* One operation's operands; each loop reads the fields its comment in cpu_loops.c names. */
typedef struct dp_loop_args {
    size_t rows, cols;  /* the [rows, cols] row-major matrix the operation walks */
    float *y;           /* the result (in place where the operation is) */
    const float *x;     /* the input */
    const float *other; /* a second input: the ReLU's output, a mask, targets, xhat */
    float *mask;        /* dropout's mask, written */
    const float *bias;  /* per column, NULL for none */
    int relu, accumulate;
    /* BatchNorm's per-column coefficients */
    const float *mean, *invstd, *gamma, *beta, *mean_dy, *mean_dy_xhat, *var;
    float *xhat, *running_mean, *running_var, *dgamma, *dbeta;
    float momentum, eps;
    double *sums;  /* column sums, or the loss totals */
    /* BatchNorm's statistics: sums read (column or channel sums), the values per channel, the
     * pixels per channel, and the per-channel results */
    const double *in_sums;
    double values;
    size_t pixels;
    float *batch_mean, *batch_invstd, *batch_var;
    const int32_t *labels;
    const dp_dropout_key *dropout;
    /* the optimizer pass */
    float *params, *grads, *state1, *state2;
    const dp_sgd_coefs *sgd;
    const dp_adamw_coefs *adamw;
    /* the sliding-window operations */
    const dp_window *window;
    dp_pool pool;
    size_t inner; /* swap_axes: the run of floats that moves whole */
    float scale;  /* sum_squares: what each value is scaled by */
    const int32_t *index; /* gather_rows: each row's row of x (rows of cols 4-byte words) */
} dp_loop_args;

/* One part of an operation; returns the non-finite values it counted (0 where it counts none). */
typedef size_t (*dp_loop_fn)(const dp_loop_args *a, size_t begin, size_t end);

/* The loops of one instruction set. Parts are rows, columns or elements as noted. */
typedef struct dp_cpu_loops {
    const char *isa;
    dp_loop_fn bias_act_forward;  /* rows */
    dp_loop_fn relu_forward;      /* elements */
    dp_loop_fn relu_backward;     /* elements */
    dp_loop_fn bias_grad;         /* columns */
    dp_loop_fn dropout_forward;   /* rows */
    dp_loop_fn multiply;          /* elements */
    dp_loop_fn accumulate;        /* elements */
    dp_loop_fn column_sums;       /* columns */
    dp_loop_fn bn_normalize;      /* rows */
    dp_loop_fn bn_backward_input; /* rows */
    dp_loop_fn bn_param_grads;    /* columns */
    dp_loop_fn bn_update_running; /* columns */
    dp_loop_fn inverse_std;       /* columns */
    dp_loop_fn bn_channel_sums;   /* elements (2 x channels) */
    dp_loop_fn bn_batch_stats;    /* channels */
    dp_loop_fn bn_means;          /* elements */
    dp_loop_fn bn_spread;         /* elements */
    dp_loop_fn softmax_xent;      /* the whole matrix only: totals add up row by row */
    dp_loop_fn mse;               /* the whole matrix only: the loss adds up element by element */
    dp_loop_fn count_nonfinite;   /* elements */
    dp_loop_fn sum_squares;       /* lanes: each sums every cols-th of the rows values in turn */
    dp_loop_fn sgd_step;          /* elements */
    dp_loop_fn adamw_step;        /* elements */
    dp_loop_fn im2col;            /* rows (samples) */
    dp_loop_fn col2im;            /* rows (samples) */
    dp_loop_fn swap_axes;         /* blocks of the middle axis */
    dp_loop_fn pool_forward;      /* rows (samples) */
    dp_loop_fn pool_backward;     /* rows (samples) */
    dp_loop_fn gather_rows;       /* rows */
} dp_cpu_loops;

/* The loops a run uses (the first call decides): those DP_CPU_LOOPS_VARIABLE names where this
 * CPU runs them, else the widest it runs. */
#define DP_CPU_LOOPS_VARIABLE "DPTRAIN_CPU_LOOPS"
const dp_cpu_loops *dp_cpu_loops_best(void);

/* The loops of instruction set `isa` ("generic", "avx2", "avx512"), or NULL when this build or
 * this CPU lacks it (tests compare every one this machine runs). */
const dp_cpu_loops *dp_cpu_loops_for(const char *isa);

/* The loops the CPU backend's context runs: the best (NULL), or these (tests compare every
 * instruction set this CPU has). */
void dp_backend_cpu_use_loops(const dp_cpu_loops *loops);

#endif
