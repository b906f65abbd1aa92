/* --exact: the same parameters, bit for bit, for every world size. The engine computes each
 * fixed shard of the step alone (src/engine/step.c); here each shard's gradient is added into
 * an exact accumulator (exact_sum.h), the ranks' sums are added as integers by one all-reduce
 * of balanced digits, and the result is rounded to float once. Every rank keeps the whole
 * model and optimizer state, as DDP. */
#include "src/strategy/strategy_type.h"

#include "dp/error.h"
#include "src/strategy/exact_sum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dp_exact {
    double *acc;      /* DP_EXACT_PIECES x layout.total: this rank's shards' exact sum */
    float *host;      /* the gradient on the host: a shard's (GPU), then the result */
    float *digits;    /* max_digits x layout.total: the all-reduce's buffer */
    int max_digits;
    size_t terms;     /* shards added since the last finish */
} dp_exact;

/* Whether c's algorithm is one of those that sum GPU memory only (nccl). */
static int sums_gpu_memory_only(const dp_comm *c)
{
    const char *names = dp_comm_gpu_algorithm_names(), *name = dp_comm_algorithm_name(c);
    size_t length = strlen(name);
    for (const char *at = strstr(names, name); at; at = strstr(at + 1, name))
        if ((at == names || at[-1] == ' ') && (at[length] == ' ' || at[length] == '\0'))
            return 1;
    return 0;
}

static int exact_open(dp_strategy *d)
{
    size_t total = d->layout.total ? d->layout.total : 1;
    if (d->comm->size > DP_EXACT_MAX_RANKS)
        return dp_fail(DP_EINVAL, "--exact works on at most %d ranks (its digits must add exactly in floats), not %d",
                       DP_EXACT_MAX_RANKS, d->comm->size);
    if (d->comm->size > 1 && sums_gpu_memory_only(d->comm))
        return dp_fail(DP_EINVAL, "--exact all-reduces its digits in host memory, which --allreduce %s cannot sum: "
                       "choose one of %s", dp_comm_algorithm_name(d->comm), dp_comm_algorithm_names());
    dp_exact *x = d->exact = dp_calloc(1, sizeof *x, "the exact accumulator");
    if (!x)
        return DP_ENOMEM;
    x->max_digits = dp_exact_max_digits(d->comm->size);
    x->acc = dp_calloc(DP_EXACT_PIECES * total, sizeof *x->acc, "the exact accumulator");
    x->host = dp_calloc(total, sizeof *x->host, "the exact gradient's host copy");
    x->digits = d->comm->size > 1 ? dp_calloc((size_t)x->max_digits * total, sizeof *x->digits,
                                              "the exact all-reduce's digits") : NULL;
    if (!x->acc || !x->host || (d->comm->size > 1 && !x->digits))
        return DP_ENOMEM;
    return d->comm->size > 1 ? dp_comm_reserve(d->comm, (size_t)x->max_digits * total, 1, 0) : 0;
}

static void exact_close(dp_strategy *d)
{
    if (!d->exact)
        return;
    free(d->exact->acc);
    free(d->exact->host);
    free(d->exact->digits);
    free(d->exact);
    d->exact = NULL;
}

/* The gradient backward just wrote (one shard's alone) into the accumulator. */
static int exact_add_shard(dp_strategy *d)
{
    dp_exact *x = d->exact;
    const dp_backend *be = d->buffers.be;
    size_t total = d->layout.total;
    if (++x->terms > DP_EXACT_MAX_TERMS)
        return dp_fail(DP_EINVAL, "--exact: more than %zu shards in one step on one rank; use a larger --exact-shard",
                       DP_EXACT_MAX_TERMS);
    const float *grads = d->buffers.grads;
    if (!be->host_memory) {
        be->download(be, x->host, d->buffers.grads, total * sizeof(float));
        grads = x->host;
    }
    dp_exact_add(x->acc, grads, total, x->terms == 1);
    return 0;
}

/* Digits enough for the largest sum on any rank: every rank sends the same count. */
static int agree_digits(dp_strategy *d, int *digits)
{
    dp_exact *x = d->exact;
    int bits = dp_exact_magnitude_bits(x->acc, d->layout.total);
    int status = dp_comm_max_int(d->comm, &bits);
    *digits = bits < 0 ? x->max_digits : dp_exact_digits_for(bits, d->comm->size);
    *digits = *digits < x->max_digits ? *digits : x->max_digits;
    return status;
}

/* The ranks' exact sums added as integers; the gradient buffer gets their float rounding. */
static int exact_finish(dp_strategy *d)
{
    dp_exact *x = d->exact;
    const dp_backend *be = d->buffers.be;
    size_t total = d->layout.total;
    float *out = be->host_memory ? d->buffers.grads : x->host;
    int status = 0;
    if (x->terms == 0) /* this rank had no shard this step */
        memset(x->acc, 0, DP_EXACT_PIECES * total * sizeof *x->acc);
    if (d->comm->size == 1) {
        dp_exact_to_floats(x->acc, total, out);
    } else {
        int digits;
        if ((status = agree_digits(d, &digits)))
            return status;
        dp_exact_to_digits(x->acc, total, d->comm->size, digits, x->digits);
        double started = MPI_Wtime();
        if ((status = dp_comm_allreduce_sum(d->comm, x->digits, (size_t)digits * total)))
            return status;
        d->times.busy += MPI_Wtime() - started;
        d->times.requests++;
        dp_exact_from_digits(x->digits, total, digits, x->acc, out);
    }
    if (!be->host_memory)
        be->upload(be, d->buffers.grads, out, total * sizeof(float));
    x->terms = 0;
    return 0;
}

static int exact_describe(const dp_strategy *d, char *text, size_t size)
{
    if (d->comm->size == 1)
        return snprintf(text, size, "exact: each shard's gradient alone, summed exactly (multiples of 2^-%d) on "
                        "one rank", DP_EXACT_FRACTION_BITS);
    return snprintf(text, size, "exact: each shard's gradient alone, summed exactly (multiples of 2^-%d), then one "
                    "all-reduce of the sums as %d-bit digits in floats (at most %d digits)", DP_EXACT_FRACTION_BITS,
                    dp_exact_digit_bits(d->comm->size), d->exact->max_digits);
}

const dp_strategy_type dp_strategy_exact = {
    .name = "exact",
    .gradient_collective = DP_ALLREDUCE,
    .collective_name = "exact all-reduce",
    .open = exact_open,
    .close = exact_close,
    .add_shard = exact_add_shard,
    .finish = exact_finish,
    .describe = exact_describe,
};
