/* The compute interface: everything the model and optimizer do to numbers goes through a
 * backend context (its operations and its state), so the CUDA backend replaces the CPU one
 * without touching model code. Matrices are row-major; pointers passed to the operations live
 * in backend memory. Operations run in issue order on the context's stream; a device backend
 * may still be running them when they return, except where a result comes back to the host
 * (download, count_nonfinite) and at synchronize. */
#ifndef DP_BACKEND_H
#define DP_BACKEND_H

#include "dp/memory.h"
#include "dp/tensor.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dp_backend dp_backend;

/* Where a dropout layer's masks come from: a hash of these and the sample and unit alone. */
typedef struct dp_dropout_key {
    uint64_t seed;        /* the run's seed mixed with the module's index */
    const uint64_t *step; /* the step number, in backend memory: written before each step, so a
                           * step replayed from a CUDA graph reads its own */
    uint64_t first_sample;/* the position of row 0 among the step's samples */
    float p;              /* drop probability */
    float scale;          /* 1 / (1 - p), what kept units are multiplied by */
} dp_dropout_key;

/* One optimizer pass (see sgd_step); apply 0 only scales and counts. */
typedef struct dp_sgd_coefs {
    float grad_scale, lr, momentum, weight_decay;
    int apply;
} dp_sgd_coefs;

/* AdamW as torch.optim.AdamW computes it: p *= decay_factor (1 - lr wd); m = beta1 m +
 * one_minus_beta1 g; v = beta2 v + (one_minus_beta2 g) g; p += neg_step_size * (m /
 * (sqrt(v) / bias_correction2_sqrt + eps)), with the scalars worked out in double and
 * rounded to float once, as PyTorch's Python scalars are. */
typedef struct dp_adamw_coefs {
    float grad_scale, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2;
    float bias_correction2_sqrt, eps, neg_step_size;
    int apply;
} dp_adamw_coefs;

/* One sample's [channels, height, width] image under a sliding window: a convolution's kernel or
 * a pooling window of kernel_h x kernel_w, moved by stride, over the image with `padding` zeros
 * on each side; out_h x out_w window positions. */
typedef struct dp_window {
    int channels, height, width;
    int kernel_h, kernel_w, stride, padding;
    int out_h, out_w;
} dp_window;

/* What a pooling window keeps: its maximum (the first one, as PyTorch) or its mean. */
typedef enum dp_pool { DP_POOL_MAX, DP_POOL_AVG } dp_pool;

/* What a fused GEMM (gemm_fused) applies to its product P = alpha op(A) op(B) + beta C, in the
 * row-major terms of gemm (C [m, n]): cuBLASLt's epilogues, named by what they do for a Linear.
 * The mask is the ReLU's: bit c + r * mask_ld of `mask` is set where C[r, c] before the ReLU was
 * not <= 0 (dp_relu_mask_ld, dp_relu_mask_bytes). */
typedef enum dp_epilogue {
    DP_EPILOGUE_BIAS,       /* C = P + bias[c] */
    DP_EPILOGUE_RELU,       /* C = max(0, P + bias[c]) (bias may be NULL) */
    DP_EPILOGUE_RELU_MASK,  /* the same, and the ReLU's mask written (training) */
    DP_EPILOGUE_DRELU,      /* C = P where the mask's bit is set, else 0: a ReLU's backward */
    DP_EPILOGUE_BIAS_GRAD,  /* C = P, and bias_grad[i] = sum_p op(A)[i, p] (m values, overwritten) */
    DP_EPILOGUES
} dp_epilogue;

typedef struct dp_gemm_epilogue {
    dp_epilogue kind;
    const float *bias;   /* BIAS, RELU, RELU_MASK: n values */
    const void *bias16;  /* gemm_rounded_bf16's bias instead: n bf16 values (cuBLASLt's bias takes D's type) */
    float *bias_grad;    /* BIAS_GRAD: m values */
    unsigned char *mask; /* RELU_MASK: written; DRELU: read (backend memory) */
    long mask_ld;        /* bits from one row's mask to the next: dp_relu_mask_ld(n) */
} dp_gemm_epilogue;

/* The boundary bf16 GEMM operand copies start on, a Linear's held ones and the CUDA backend's
 * per-GEMM ones alike: cuBLAS and cuBLASLt pick kernels, and so bits, by alignment. */
#define DP_GEMM_OPERAND_ALIGN ((size_t)256)

/* The operation name supports() is asked for an epilogue: "gemm_fused/bias", ... */
extern const char *const dp_epilogue_ops[DP_EPILOGUES];
/* Whether an epilogue sums one of its GEMM's operands (the bias gradient sums dY): with bf16
 * operand copies it would sum the copy, so backends run it with FP32 operands only. */
extern const int dp_epilogue_sums_operand[DP_EPILOGUES];

/* A ReLU mask's row pitch in bits for rows of `cols` values (cuBLASLt's: a multiple of 128). */
static inline long dp_relu_mask_ld(int cols)
{
    return ((long)cols + 127) / 128 * 128;
}

/* Bytes of a mask for rows x cols values. */
static inline size_t dp_relu_mask_bytes(int rows, int cols)
{
    return (size_t)rows * (size_t)(dp_relu_mask_ld(cols) / 8);
}

/* A backend context: the device, its state and its operations. Every operation takes the
 * context first and finds there what it needs (CUDA: the GPU, the stream it queues on, cuBLAS's
 * handle, the reduction scratch, the timer's events), so no backend keeps globals. */
struct dp_backend {
    const char *name;
    int host_memory; /* 1 when backend memory is host memory, so host arrays serve in place */
    void *state;     /* the backend's own, for its operations */
    /* The stream every operation queues on (a cudaStream_t of the backend's own; NULL on the
     * CPU): device work of others (NCCL) orders itself after the step's with an event on it. */
    void *stream;

    /* 1 when `op` (an operation's name, as the member) takes `dtype`; else 0 with the reason
     * in why (see dp_backend_require). */
    int (*supports)(const dp_backend *be, const char *op, dp_dtype dtype, char *why, size_t size);

    /* Backend memory, charged to `kind` in the allocation counter (dp/memory.h); alloc returns
     * NULL (with dp_last_error set) on failure, and when the process's --max-memory-mb would
     * be exceeded. */
    void *(*alloc)(const dp_backend *be, size_t bytes, dp_memory_kind kind, const char *what);
    void (*free)(const dp_backend *be, void *ptr);
    /* Host memory the device copies fastest (page-locked under CUDA); NULL on failure. */
    void *(*alloc_host)(const dp_backend *be, size_t bytes, const char *what);
    void (*free_host)(const dp_backend *be, void *ptr);
    void (*upload)(const dp_backend *be, void *dst, const void *host_src, size_t bytes);
    /* The same copy queued behind the stream's work, returning at once: host_src is alloc_host
     * memory the caller leaves unchanged until something waits for the stream (a download,
     * synchronize). */
    void (*upload_queued)(const dp_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(const dp_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*zero)(const dp_backend *be, float *x, size_t n);

    /* C = alpha * op(A) op(B) + beta * C with op(A) [m, k], op(B) [k, n], C [m, n]. */
    void (*gemm)(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

    /* gemm and an epilogue in one pass (see dp_epilogue); NULL where the backend has none, and
     * an epilogue it declines (supports(dp_epilogue_ops[kind])) is not asked for. */
    void (*gemm_fused)(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc,
                       const dp_gemm_epilogue *epilogue);

    /* GEMM operands rounded once and read by several GEMMs (a Linear's input, weight and output
     * gradient at --precision bf16), where supports(be, "gemm_rounded", DP_DTYPE_BF16) says the
     * GEMMs read bf16 (NULL where the backend has none): round_operand writes copy[i] = x[i]
     * rounded to bf16, nearest even (n 2-byte values; copy DP_GEMM_OPERAND_ALIGN-byte aligned, as
     * alloc's memory is), and gemm_rounded is gemm (epilogue NULL) or gemm_fused with A and B such copies, laid
     * out as gemm's a and b: the bits gemm's own rounding of each call's operands gives. */
    void (*round_operand)(const dp_backend *be, void *copy, const float *x, size_t n);
    void (*gemm_rounded)(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                         const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc,
                         const dp_gemm_epilogue *epilogue);
    /* gemm_rounded with C written in bf16 and beta 0, where supports(be, "gemm_rounded_bf16",
     * DP_DTYPE_BF16) (NULL where the backend has none): the product summed in FP32, the epilogue
     * (BIAS, RELU or RELU_MASK, its bias the bf16 copy bias16 or none; DRELU) applied in FP32,
     * then C rounded to nearest even. For an output only other GEMMs read (a Linear's bf16
     * activation, and the input gradient of a bias-free one). */
    void (*gemm_rounded_bf16)(const dp_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                              const void *a, int lda, const void *b, int ldb, void *c, int ldc,
                              const dp_gemm_epilogue *epilogue);

    /* y[r, c] += bias[c] (bias may be NULL), then max(0, y) when relu. */
    void (*bias_act_forward)(const dp_backend *be, float *y, const float *bias, int rows, int cols, int relu);
    /* y[i] = max(0, x[i]): a ReLU that follows something other than a Linear. */
    void (*relu_forward)(const dp_backend *be, float *y, const float *x, size_t n);
    /* dy[i] = 0 where the ReLU output y[i] was 0. */
    void (*relu_backward)(const dp_backend *be, float *dy, const float *y, size_t n);
    /* db[c] = (accumulate ? db[c] : 0) + sum over rows of dy[r, c]. */
    void (*bias_grad)(const dp_backend *be, const float *dy, int rows, int cols, float *db, int accumulate);

    /* Dropout: mask[r, c] = key->scale (kept) or 0, drawn from (seed, step, sample
     * first_sample + r, unit c) alone, so any split of the rows over ranks draws the same
     * masks; y = x * mask. */
    void (*dropout_forward)(const dp_backend *be, float *y, const float *x, float *mask, int rows, int cols,
                            const dp_dropout_key *key);
    /* y[i] = x[i] * mask[i] (dropout's backward). */
    void (*multiply)(const dp_backend *be, float *y, const float *x, const float *mask, size_t n);
    /* y[i] = x[i] (add 0), or y[i] + x[i] (add 1): copies and sums within backend memory (a
     * ZeRO rank's share of a reduced gradient bucket into its gradient shard). */
    void (*accumulate)(const dp_backend *be, float *y, const float *x, size_t n, int add);

    /* Convolution lowered to a GEMM over all rows: col[(c, i, j), (r, oh, ow)] = x[r, c, oh s - p + i,
     * ow s - p + j] (0 outside the image), col [channels kernel_h kernel_w, rows out_h out_w]. */
    void (*im2col)(const dp_backend *be, const float *x, float *col, int rows, const dp_window *w);
    /* Its adjoint: dx[r, c, h, w] = the sum of the col entries im2col copied from there, added
     * in window order (oh, then ow, ascending); dx overwritten. */
    void (*col2im)(const dp_backend *be, const float *col, float *dx, int rows, const dp_window *w);
    /* y [middle, outer, inner] = x [outer, middle, inner] with its outer axes swapped: a
     * convolution's [channels, rows, positions] GEMM result to [rows, channels, positions]. */
    void (*swap_axes)(const dp_backend *be, const float *x, float *y, size_t outer, size_t middle, size_t inner);
    /* y [rows, channels, out_h, out_w]: each window's maximum (NaN wins, as PyTorch) or mean. */
    void (*pool_forward)(const dp_backend *be, const float *x, float *y, int rows, const dp_window *w, dp_pool pool);
    /* dx (overwritten) from dy: max passes each window's gradient to its first maximum, avg
     * spreads dy / (kernel_h kernel_w) over the window; added in window order. */
    void (*pool_backward)(const dp_backend *be, const float *x, const float *dy, float *dx, int rows,
                          const dp_window *w, dp_pool pool);

    /* Column sums in double for BatchNorm: out[c] = sum_r a[r, c] and
     * out[cols + c] = sum_r a[r, c] * b[r, c]; out is backend memory, overwritten. */
    void (*column_sums)(const dp_backend *be, const float *a, const float *b, int rows, int cols, double *out);
    /* xhat = (x - mean[c]) * invstd[c]; y = gamma[c] * xhat + beta[c] (xhat NULL in eval). */
    void (*bn_normalize)(const dp_backend *be, const float *x, float *xhat, float *y, int rows, int cols,
                         const float *mean, const float *invstd, const float *gamma,
                         const float *beta);
    /* dx = gamma[c] * invstd[c] * (dy - mean_dy[c] - xhat * mean_dy_xhat[c]). */
    void (*bn_backward_input)(const dp_backend *be, const float *dy, const float *xhat, float *dx, int rows, int cols,
                              const float *gamma, const float *invstd, const float *mean_dy,
                              const float *mean_dy_xhat);
    /* dgamma (+)= (float) sums[cols + c], dbeta (+)= (float) sums[c]: column_sums of (dy, xhat). */
    void (*bn_param_grads)(const dp_backend *be, const double *sums, int cols, float *dgamma, float *dbeta,
                           int accumulate);
    /* running = (1 - momentum) running + momentum batch, for the mean and the unbiased variance. */
    void (*bn_update_running)(const dp_backend *be, float *running_mean, float *running_var, const float *mean,
                              const float *var_unbiased, int cols, float momentum);
    /* invstd[i] = 1 / sqrt(var[i] + eps) (BatchNorm in eval mode). */
    void (*inverse_std)(const dp_backend *be, const float *var, float *invstd, int n, float eps);
    /* BatchNorm's statistics finished in backend memory, so a step needs no host in between (a
     * CUDA graph replays it). Per channel: channel_sums[s, ch] = the sum over q < pixels of
     * column_sums[s, ch pixels + q], for the two rows s of column_sums ([2, channels pixels]). */
    void (*bn_channel_sums)(const dp_backend *be, const double *column_sums, double *channel_sums, int channels,
                            int pixels);
    /* From channel_sums' (sum, sum of squares) over n values each: the mean, 1 / sqrt(biased
     * variance + eps) and the unbiased variance, per channel (kernel_math.h's dp_bn_batch_stats). */
    void (*bn_batch_stats)(const dp_backend *be, const double *channel_sums, int channels, double n, float eps,
                           float *mean, float *invstd, float *var_unbiased);
    /* means[i] = (float) (sums[i] / n) (backward's means of dy and dy xhat). */
    void (*bn_means)(const dp_backend *be, const double *sums, int count, double n, float *means);
    /* columns[r, ch pixels + q] = per_channel[r, ch]: `count` rows of per-channel values spread over
     * their channels' columns. */
    void (*bn_spread)(const dp_backend *be, const float *per_channel, float *columns, int channels, int pixels,
                      int count);

    /* Summed (not averaged) softmax cross-entropy over rows; dlogits = softmax - onehot
     * (skipped when NULL); totals[0] += the loss, totals[1] += rows whose argmax is the
     * label. totals is backend memory (two doubles), so the sums stay on a device until the
     * caller downloads them. */
    void (*softmax_xent)(const dp_backend *be, const float *logits, const int32_t *labels, int rows, int cols,
                         float *dlogits, double *totals);
    /* Per-sample loss mean_c (pred - target)^2 summed over rows into totals[0], as PyTorch's
     * MSELoss once divided by the batch; dpred = 2 (pred - target) / cols (skipped when NULL). */
    void (*mse)(const dp_backend *be, const float *pred, const float *targets, int rows, int cols, float *dpred,
                double *totals);

    /* *total (backend memory) += the sum of (x[i] * scale rounded to float)^2 over x[0..n), each
     * square exact in double, added in an order fixed by n alone (the CPU: 64 lanes, lane c
     * summing elements c, c + 64, ... in turn, then the lanes in order; a GPU: its reduction's
     * tree): the same bits on every thread count and instruction set (--clip-grad-norm). */
    void (*sum_squares)(const dp_backend *be, const float *x, size_t n, float scale, double *total);
    /* How many of x[0..n) are NaN or infinite (returned to the host). */
    size_t (*count_nonfinite)(const dp_backend *be, const float *x, size_t n);
    /* The optimizer's pass over one range: g *= k->grad_scale (the 1 / global sample count),
     * *nonfinite += elements whose g, or p after the update, is NaN or infinite (backend
     * memory), then, when k->apply, the update:
     * PyTorch SGD (d = g + wd p; v = momentum v + d, or v = d when momentum is 0; p -= lr v)
     * or AdamW (torch.optim.AdamW's formulas, roundings in its order; see dp_adamw_coefs). The
     * coefficients k are backend memory, read when the pass runs: a replayed graph's pass takes
     * the ones written for its step. */
    void (*sgd_step)(const dp_backend *be, float *params, float *grads, float *velocity, size_t n,
                     const dp_sgd_coefs *k, double *nonfinite);
    void (*adamw_step)(const dp_backend *be, float *params, float *grads, float *exp_avg, float *exp_avg_sq, size_t n,
                       const dp_adamw_coefs *k, double *nonfinite);

    /* Returns once every operation issued so far has finished. */
    void (*synchronize)(const dp_backend *be);
    /* Graphs of operations replayed with one launch (CUDA graphs; NULL on a backend without):
     * capture_begin makes the operations issued next be recorded instead of run (supports(be,
     * "capture", ...) says whether it can now); capture_end ends the recording and returns it
     * as a graph, or NULL with the error recorded when an operation in it needed the host;
     * graph_launch queues one replay, which reads and writes the memory the recorded
     * operations were given, with the values found there when it runs; graph_free releases. */
    int (*capture_begin)(const dp_backend *be);
    void *(*capture_end)(const dp_backend *be);
    void (*graph_launch)(const dp_backend *be, void *graph);
    void (*graph_free)(const dp_backend *be, void *graph);
    /* The device and its settings, for the banner. */
    const char *(*describe)(const dp_backend *be);

    /* Device time for --trace, on a backend whose work the host's clock does not see (NULL on
     * the CPU): timer_mark queues a timestamp after the work issued so far and returns its
     * slot, or -1 when all DP_TIMER_SLOTS are taken; timer_seconds gives the device's seconds
     * from slot `from`'s timestamp to slot `to`'s once synchronize has returned; timer_reset
     * frees every slot. */
    int (*timer_mark)(const dp_backend *be);
    double (*timer_seconds)(const dp_backend *be, int from, int to);
    void (*timer_reset)(const dp_backend *be);

    /* ---- the training data held in backend memory (src/train/resident.c) ---- */
    /* Row r of dst = row index[r] of src, rows of `words` 4-byte words (float features, int32
     * labels or float targets alike): a micro-batch's rows picked from a whole dataset in
     * backend memory; index is backend memory, so it takes no host wait. */
    void (*gather_rows)(const dp_backend *be, void *dst, const void *src, const int32_t *index, int rows, int words);
    /* The device's free and total memory in bytes; NULL where backend memory is host memory. */
    void (*memory_info)(const dp_backend *be, size_t *free_bytes, size_t *total_bytes);

    /* ---- --exact's accumulator in backend memory (src/strategy/exact.c; NULL where backend
     * memory is host memory, whose loops are src/strategy/exact_sum.c's) ---- */
    /* exact_sum.h's dp_exact_add, dp_exact_to_floats, dp_exact_to_digits and
     * dp_exact_from_digits (int64 digits of digit_bits bits) on backend memory, bit for bit;
     * the sums read are acc's (NULL: none) plus a pending row group's `last` (NULL: none), as
     * exact_math.h's dp_exact_sums; from digit 0, exact_to_digits also leaves the largest
     * dp_exact_size_bits in *largest (backend memory), so 8 bytes tell the host the sums'
     * magnitude. */
    void (*exact_add)(const dp_backend *be, double *acc, const float *values, size_t n, int first);
    void (*exact_to_floats)(const dp_backend *be, const double *acc, const float *last, size_t n, float *out);
    void (*exact_to_digits)(const dp_backend *be, const double *acc, const float *last, size_t n, int digit_bits,
                            int first, int digits, int64_t *out, uint64_t *largest);
    void (*exact_from_digits)(const dp_backend *be, const int64_t *digits, size_t n, int digit_bits, int count,
                              float *out);
};

/* The timestamps a backend's timer holds at once (a step's module passes and an anchor). */
#define DP_TIMER_SLOTS 4096

/* 0 when be->supports(op, dtype); else DP_EINVAL with a message naming the backend, the
 * operation, the dtype and the backend's reason. */
int dp_backend_require(const dp_backend *be, const char *op, dp_dtype dtype);

/* The CPU backend's context: one per process, as OpenBLAS's thread count is. */
const dp_backend *dp_backend_cpu(void);

/* Sets the CPU backend's BLAS threads per rank (OpenBLAS); others ignore it. why, when not
 * NULL, says where the number came from (for the banner). */
void dp_backend_cpu_set_threads(int threads, const char *why);

/* What decides how be's results round, for checkpoints to compare: on the CPU, OpenBLAS's
 * thread count ("cpu with 2 BLAS threads"); elsewhere the backend's name. */
void dp_backend_arithmetic(const dp_backend *be, char *text, size_t size);

/* The default of --threads: the cores this process is bound to, or, unbound, the node's
 * cores divided by its local_size ranks (at least 1); why says which (src/backend/cpu_threads.c). */
int dp_backend_cpu_default_threads(int local_size, char *why, size_t size);

typedef enum dp_device { DP_DEVICE_CPU, DP_DEVICE_CUDA, DP_DEVICE_AUTO } dp_device;

/* A GPU's identity across processes: its UUID. Two ranks whose CUDA_VISIBLE_DEVICES differ
 * (srun --gpus-per-task=1 gives each rank "0") see one physical GPU under one UUID. */
typedef struct dp_gpu_id {
    unsigned char uuid[16];
} dp_gpu_id;

/* Visible GPUs one rank reports for the binding. */
#define DP_MAX_VISIBLE_GPUS 16

/* Which GPU a rank binds, decided over its node's ranks (dp_backend_plan_binding). */
typedef struct dp_gpu_binding {
    int gpu;          /* this rank's GPU: an index into its visible GPUs */
    int own_gpu;      /* 1: no other rank of the node binds the same physical GPU */
    int gpus_visible; /* GPUs this rank sees */
    char text[320];   /* the node's binding in words, for the banner and errors */
} dp_gpu_binding;

/* --precision. Training: how the GPU's GEMMs read their FP32 inputs, always accumulating in
 * FP32 into FP32 outputs (weights, optimizer state, activations, losses and sums stay FP32):
 * fp32 exactly, tf32 rounded to a 10-bit mantissa, bf16 rounded to bfloat16's 7 bits. The
 * last two only describe --memory-plan's bytes per parameter, no backend trains them: fp16 is
 * the documents' table (FP16 parameters and gradients, FP32 optimizer state, no FP32 master
 * copy), mixed the ZeRO paper's (FP16 parameters and gradients, an FP32 master copy beside the
 * FP32 optimizer state). */
typedef enum dp_precision {
    DP_PRECISION_FP32, DP_PRECISION_TF32, DP_PRECISION_BF16, DP_PRECISION_FP16, DP_PRECISION_MIXED, DP_PRECISIONS
} dp_precision;

/* --cuda-graph: whether training replays full steps from a captured graph (src/engine/graph.c):
 * never, always (an error where a step cannot be captured) or where it can. */
typedef enum dp_graph_mode { DP_GRAPH_OFF, DP_GRAPH_ON, DP_GRAPH_AUTO } dp_graph_mode;

typedef struct dp_backend_request {
    dp_device device;     /* AUTO: CUDA when dp_backend_cuda_usable, decided by this rank alone */
    int share_gpu;        /* allow ranks of a node to share a GPU (they take turns) */
    dp_precision precision; /* the GEMMs' inputs: FP32, TF32 or BF16 (which the CPU declines) */
    int unfused;          /* --fuse off: the backend declines every gemm_fused epilogue */
    int rank, local_rank, local_size; /* this rank, and its place among the node's ranks */
    /* The node's plan, when the caller made one; NULL: GPU local_rank % visible GPUs, and
     * own GPUs when the node's ranks are no more than the GPUs (one process's view). */
    const dp_gpu_binding *binding;
} dp_backend_request;

/* CUDA GPUs this process sees: 0 without a CUDA build, a driver or a GPU. */
int dp_backend_gpu_count(void);

/* The UUIDs of up to max GPUs this process sees, in CUDA's order; returns how many. */
int dp_backend_gpu_ids(dp_gpu_id *ids, int max);

/* The binding of the node's `ranks` ranks: visible[r * DP_MAX_VISIBLE_GPUS + i] is local rank
 * r's i-th visible GPU, counts[r] how many it sees. Every rank of the node computes the same
 * plan from the same table: ranks get distinct physical GPUs whenever that is possible (a
 * matching; with the same N >= ranks GPUs everywhere, local rank r gets GPU r), else own_gpu
 * is 0 and each takes GPU local_rank % its count. Fills `out` for local rank `me`. */
int dp_backend_plan_binding(const dp_gpu_id *visible, const int *counts, int ranks, int me,
                            dp_gpu_binding *out);

/* 1 when `request` may run on CUDA: this rank sees a GPU and, without share_gpu, has one of
 * its own. */
int dp_backend_cuda_usable(const dp_backend_request *request);

/* The backend of request->device. CUDA binds the planned GPU (or local_rank % count) and
 * fails, naming the problem, without a CUDA build or GPU, or when ranks of the node would
 * share a GPU unless share_gpu. Each CUDA open makes a context of its own (stream, cuBLAS
 * handle, scratch); dp_backend_close releases it. The GPU is CUDA's current device of the
 * calling thread, so contexts on different GPUs in one thread are not supported. */
int dp_backend_open(const dp_backend_request *request, const dp_backend **out);
void dp_backend_close(const dp_backend *be);

/* The operations return nothing, so a device backend cannot hand a failed CUDA or cuBLAS
 * call back: it records the call, file, line, rank and CUDA's message (dp_last_error) and
 * calls this handler, which must not return. dp_worker's reports the error and MPI_Aborts
 * the job; without one, the message goes to stderr and MPI_Abort ends the job, as MPI's own
 * MPI_ERRORS_ARE_FATAL does. */
typedef void (*dp_backend_fatal_fn)(void);
void dp_backend_set_fatal_handler(dp_backend_fatal_fn handler);

#endif
