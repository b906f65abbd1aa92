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

/* The first step sends the digits of sums below 2^8 (a gradient sum's usual size). */
enum { FIRST_GUESS_BITS = DP_EXACT_FRACTION_BITS + 8 + 1 };

typedef struct dp_exact {
    double *acc;      /* DP_EXACT_PIECES x layout.total: this rank's shards' exact sum */
    float *host;      /* the gradient on the host: a shard's (GPU), then the result */
    float *message;   /* the all-reduce's buffer: max_digits counts, then max_digits x layout.total digits */
    int max_digits;
    int digits;       /* digits sent first: the count the ranks needed at the last step */
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
    x->digits = dp_exact_digits_for(FIRST_GUESS_BITS, d->comm->size);
    size_t message = (size_t)x->max_digits * (total + 1);
    x->acc = dp_calloc(DP_EXACT_PIECES * total, sizeof *x->acc, "the exact accumulator");
    x->host = dp_calloc(total, sizeof *x->host, "the exact gradient's host copy");
    x->message = d->comm->size > 1 ? dp_calloc(message, sizeof *x->message, "the exact all-reduce's digits") : NULL;
    if (!x->acc || !x->host || (d->comm->size > 1 && !x->message))
        return DP_ENOMEM;
    return d->comm->size > 1 ? dp_comm_reserve(d->comm, message, 1, 0) : 0;
}

static void exact_close(dp_strategy *d)
{
    if (!d->exact)
        return;
    free(d->exact->acc);
    free(d->exact->host);
    free(d->exact->message);
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

/* Digits sums of `bits` bits need (all of them where one is not finite: its size is unknown). */
static int digits_needed(const dp_exact *x, int bits, int ranks)
{
    int digits = bits < 0 ? x->max_digits : dp_exact_digits_for(bits, ranks);
    return digits < x->max_digits ? digits : x->max_digits;
}

static int sum_over_ranks(dp_strategy *d, float *values, size_t count)
{
    double started = MPI_Wtime();
    int status = dp_comm_allreduce_sum(d->comm, values, count);
    d->times.busy += MPI_Wtime() - started;
    d->times.requests++;
    return status;
}

/* The ranks' exact sums added as integers, in one all-reduce where the last step's digit
 * count suffices: beside the digits each rank counts 1 for the digits it needs, so all learn
 * the largest need from the same sums, and only when it exceeds what was sent do the missing
 * digits follow in a second all-reduce. The count sent first follows the need step by step. */
static int sum_digits(dp_strategy *d, float *out)
{
    dp_exact *x = d->exact;
    size_t total = d->layout.total;
    int ranks = d->comm->size, sent = x->digits, status;
    float *needs = x->message, *digits = x->message + x->max_digits;
    memset(needs, 0, (size_t)x->max_digits * sizeof *needs);
    needs[digits_needed(x, dp_exact_first_digits(x->acc, total, ranks, sent, digits), ranks) - 1] = 1.0f;
    if ((status = sum_over_ranks(d, x->message, (size_t)x->max_digits + (size_t)sent * total)))
        return status;
    int needed = x->max_digits;
    while (needs[needed - 1] == 0.0f) /* some rank needs at least one digit */
        needed--;
    if (needed > sent) {
        dp_exact_to_digits(x->acc, total, ranks, sent, needed, digits);
        if ((status = sum_over_ranks(d, digits + (size_t)sent * total, (size_t)(needed - sent) * total)))
            return status;
    }
    dp_exact_from_digits(digits, total, needed > sent ? needed : sent, out);
    x->digits = needed;
    return 0;
}

/* The ranks' exact sums; the gradient buffer gets their float rounding. */
static int exact_finish(dp_strategy *d)
{
    dp_exact *x = d->exact;
    const dp_backend *be = d->buffers.be;
    size_t total = d->layout.total;
    float *out = be->host_memory ? d->buffers.grads : x->host;
    int status = 0;
    if (x->terms == 0) /* this rank had no shard this step */
        memset(x->acc, 0, DP_EXACT_PIECES * total * sizeof *x->acc);
    if (d->comm->size == 1)
        dp_exact_to_floats(x->acc, total, out);
    else if ((status = sum_digits(d, out)))
        return status;
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
                    "all-reduce of the sums as %d-bit digits in floats (as many as the last step needed, at most "
                    "%d; the rest in a second one when the sums outgrow them)", DP_EXACT_FRACTION_BITS,
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
