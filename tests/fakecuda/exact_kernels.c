/* The launchers of src/backend/cuda_exact_kernels.h on the host, for the fake-CUDA test build:
 * each queues a task that checks its pointers are device memory and then runs every block and
 * thread of the kernel's launch shape through the per-thread functions the kernel calls
 * (exact_grid.h); the largest size is the maximum of the threads', as atomicMax leaves it. */
#include "tests/fakecuda/fakecuda.h"

#include "src/backend/cuda_exact_kernels.h"
#include "src/backend/exact_grid.h"

typedef struct exact_args {
    dp_shape s;
    double *acc;
    const float *values;  /* add: the shard's gradient; to_floats, to_digits: the pending shard (or NULL) */
    int64_t *digits_out;  /* to_digits */
    const int64_t *digits_in; /* from_digits */
    float *out;
    uint64_t *largest;
    size_t n;
    int first, digits, b;
} exact_args;

#define QUEUE(run, args, name) fakecuda_enqueue_on(stream, run, &(args), sizeof(args), name, NULL)

/* Runs thread(a, span) for every block and thread of a's 1-D shape; the largest it returned. */
static uint64_t each_thread(exact_args *a, uint64_t (*thread)(exact_args *a, dp_span span))
{
    uint64_t largest = 0;
    for (unsigned block = 0; block < a->s.grid_x; block++)
        for (unsigned t = 0; t < a->s.block_x; t++) {
            uint64_t mine = thread(a, dp_span_x(a->s, block, t));
            largest = mine > largest ? mine : largest;
        }
    return largest;
}

static int need_acc(const exact_args *a)
{
    return fakecuda_need(a->acc, DP_EXACT_PIECES * a->n * sizeof *a->acc, "the accumulator");
}

/* The sums to_floats and to_digits read: the accumulator (where given) and the pending shard. */
static int need_sums(const exact_args *a)
{
    return (!a->acc || need_acc(a)) &&
           (!a->values || fakecuda_need(a->values, a->n * sizeof(float), "the pending shard"));
}

static dp_exact_sums sums_of(const exact_args *a)
{
    return (dp_exact_sums){.acc = a->acc, .last = a->values};
}

static uint64_t add_thread(exact_args *a, dp_span span)
{
    dp_exact_add_thread(a->acc, a->values, a->n, a->first, span);
    return 0;
}

static void run_add(void *raw)
{
    exact_args *a = raw;
    if (need_acc(a) && fakecuda_need(a->values, a->n * sizeof(float), "values"))
        each_thread(a, add_thread);
}

cudaError_t dp_cuda_exact_add(cudaStream_t stream, double *acc, const float *values, size_t n, int first)
{
    exact_args a = {.s = dp_shape_flat(n), .acc = acc, .values = values, .n = n, .first = first};
    return n == 0 ? cudaSuccess : QUEUE(run_add, a, "exact_add_kernel");
}

static uint64_t to_floats_thread(exact_args *a, dp_span span)
{
    dp_exact_to_floats_thread(sums_of(a), a->n, a->out, span);
    return 0;
}

static void run_to_floats(void *raw)
{
    exact_args *a = raw;
    if (need_sums(a) && fakecuda_need(a->out, a->n * sizeof(float), "out"))
        each_thread(a, to_floats_thread);
}

cudaError_t dp_cuda_exact_to_floats(cudaStream_t stream, const double *acc, const float *last, size_t n, float *out)
{
    exact_args a = {.s = dp_shape_flat(n), .acc = (double *)acc, .values = last, .out = out, .n = n};
    return n == 0 ? cudaSuccess : QUEUE(run_to_floats, a, "exact_to_floats_kernel");
}

static uint64_t to_digits_thread(exact_args *a, dp_span span)
{
    return dp_exact_digits_thread(sums_of(a), a->n, a->b, a->first, a->digits, a->digits_out, span);
}

static void run_to_digits(void *raw)
{
    exact_args *a = raw;
    if (!need_sums(a) || !fakecuda_need(a->digits_out, (size_t)a->digits * a->n * sizeof(int64_t), "digits") ||
        (a->first == 0 && !fakecuda_need(a->largest, sizeof *a->largest, "largest")))
        return;
    uint64_t largest = each_thread(a, to_digits_thread);
    if (a->first == 0)
        *a->largest = largest;
}

cudaError_t dp_cuda_exact_to_digits(cudaStream_t stream, const double *acc, const float *last, size_t n, int digit_bits,
                                    int first, int digits, int64_t *out, uint64_t *largest)
{
    exact_args a = {.s = dp_shape_flat(n), .acc = (double *)acc, .values = last, .digits_out = out, .largest = largest,
                    .n = n, .first = first, .digits = digits, .b = digit_bits};
    return QUEUE(run_to_digits, a, "exact_to_digits_kernel");
}

static uint64_t from_digits_thread(exact_args *a, dp_span span)
{
    dp_exact_from_digits_thread(a->digits_in, a->n, a->b, a->digits, a->out, span);
    return 0;
}

static void run_from_digits(void *raw)
{
    exact_args *a = raw;
    if (fakecuda_need(a->digits_in, (size_t)a->digits * a->n * sizeof(int64_t), "digits") &&
        fakecuda_need(a->out, a->n * sizeof(float), "out"))
        each_thread(a, from_digits_thread);
}

cudaError_t dp_cuda_exact_from_digits(cudaStream_t stream, const int64_t *digits, size_t n, int digit_bits, int count,
                                      float *out)
{
    exact_args a = {.s = dp_shape_flat(n), .digits_in = digits, .out = out, .n = n, .digits = count, .b = digit_bits};
    return n == 0 ? cudaSuccess : QUEUE(run_from_digits, a, "exact_from_digits_kernel");
}
