/* --exact: the same parameters, bit for bit, for every world size. The engine computes each
 * fixed group of the step alone (src/engine/step.c); here each group's gradient is added into
 * an exact accumulator (exact_sum.h), the ranks' sums are added as integers by one all-reduce
 * of int64 digits, and the result is rounded to float once. The accumulator lives where the
 * gradient does: on a device the adds, the digits and the rounding are kernels (exact_math.h's
 * arithmetic, as the host loops'), and only the digits cross to the host for the all-reduce
 * (nothing at W = 1). Every rank keeps the whole model and optimizer state, as DDP. */
#include "src/strategy/strategy_type.h"

#include "dp/error.h"
#include "src/strategy/exact_sum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first step sends the digits of sums below 2^8 (a gradient sum's usual size). */
enum { FIRST_GUESS_BITS = DP_EXACT_FRACTION_BITS + 8 + 1 };

typedef struct dp_exact {
    const dp_backend *be;
    int on_device;    /* the accumulator and digits live in backend memory (be->exact_add) */
    double *acc;      /* on a device: DP_EXACT_PIECES x layout.total, this rank's groups' exact sum */
    dp_exact_acc host; /* on the host: the same sum, in units while it is small (exact_sum.h) */
    int64_t *digits;  /* on a device: the sums' size (dp_exact_size_bits), then max_digits x
                       * layout.total digits, made and summed there: one download takes both */
    int64_t *message; /* the all-reduce's buffer (host), see the slots below */
    int max_digits;
    int digits_sent;  /* digits sent first: the count the ranks needed at the last step */
    size_t terms;     /* groups computed since the last finish */
    int pending;      /* the gradient buffer holds the rank's last group, not added (the passes
                       * of finish add it as they read the accumulator) */
} dp_exact;

/* The message: ranks whose sums are not finite (1 each), then max_digits needs (1 at the count
 * each rank needs), the size slot (where a device's size lands, sent as 0), the digits, and the
 * flags of the sums that are not finite (a second all-reduce, only in a step that has some). */
enum { NOT_FINITE = 0, NEEDS = 1 };
static int64_t *size_slot(const dp_exact *x)
{
    return x->message + NEEDS + x->max_digits;
}
static int64_t *message_digits(const dp_exact *x)
{
    return size_slot(x) + 1;
}
static size_t head_of(const dp_exact *x)
{
    return (size_t)(message_digits(x) - x->message);
}

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

/* int64s of the all-reduce's message for `total` sums over `world` ranks (the slots above). */
static size_t message_count(int world, size_t total)
{
    size_t digits = (size_t)dp_exact_max_digits(world);
    return digits + 2 + digits * total + total;
}

/* On a device: the accumulator and the digits there (the message is page-locked host memory);
 * on the host: the accumulator and the message. As exact_open allocates them. */
static double exact_working_bytes(const dp_strategy_choice *c, const dp_strategy_sizes *s)
{
    (void)c;
    size_t total = s->params ? s->params : 1, digits = (size_t)dp_exact_max_digits(s->world) * total;
    double message = s->world > 1 ? (double)message_count(s->world, total) * sizeof(int64_t) : 0.0;
    if (s->on_device)
        return (double)DP_EXACT_PIECES * total * sizeof(double) + (s->world > 1 ? (1.0 + digits) * sizeof(int64_t) : 0.0);
    return (double)dp_exact_acc_bytes(s->params) + message;
}

static int exact_open(dp_strategy *d)
{
    size_t total = d->layout.total ? d->layout.total : 1;
    if (d->comm->size > DP_EXACT_MAX_RANKS)
        return dp_fail(DP_EINVAL, "--exact works on at most %d ranks (W of its digits must add within int64), not %d",
                       DP_EXACT_MAX_RANKS, d->comm->size);
    if (d->comm->size > 1 && sums_gpu_memory_only(d->comm))
        return dp_fail(DP_EINVAL, "--exact all-reduces its digits in host memory, which --allreduce %s cannot sum: "
                       "choose one of %s", dp_comm_algorithm_name(d->comm), dp_comm_algorithm_names());
    dp_exact *x = d->state = dp_calloc(1, sizeof *x, "the exact accumulator");
    if (!x)
        return DP_ENOMEM;
    x->be = d->buffers.be;
    x->on_device = !x->be->host_memory;
    if (x->on_device && !x->be->exact_add)
        return dp_fail(DP_EINVAL, "--exact: the %s backend cannot sum in its own memory", x->be->name);
    x->max_digits = dp_exact_max_digits(d->comm->size);
    x->digits_sent = dp_exact_digits_for(FIRST_GUESS_BITS, d->comm->size);
    size_t digits = (size_t)x->max_digits * total, message = message_count(d->comm->size, total);
    if (x->on_device) {
        x->acc = x->be->alloc(x->be, DP_EXACT_PIECES * total * sizeof *x->acc, DP_MEM_WORKING, "the exact accumulator");
        x->digits = d->comm->size > 1 ? x->be->alloc(x->be, (1 + digits) * sizeof *x->digits, DP_MEM_WORKING,
                                                     "the exact all-reduce's digits") : NULL;
        if (!x->acc || (d->comm->size > 1 && !x->digits))
            return DP_ENOMEM;
    } else {
        void *memory = dp_strategy_host_buffer(d, dp_exact_acc_bytes(d->layout.total), "the exact accumulator");
        if (!memory)
            return DP_ENOMEM;
        dp_exact_acc_place(&x->host, d->layout.total, memory);
    }
    if (d->comm->size == 1)
        return 0;
    /* The digits cross the bus from and to page-locked memory on a device (the fastest copies). */
    x->message = dp_strategy_host_buffer(d, message * sizeof *x->message, "the exact all-reduce's digits");
    if (!x->message)
        return DP_ENOMEM;
    return dp_comm_reserve(d->comm, 2 * message, 1, 0); /* counted in floats: an int64 is two */
}

static void exact_close(dp_strategy *d)
{
    dp_exact *x = d->state;
    if (!x)
        return;
    if (x->on_device) { /* what a failed open left NULL is skipped */
        void *device[] = {x->acc, x->digits};
        for (size_t i = 0; i < sizeof device / sizeof *device; i++)
            if (device[i])
                x->be->free(x->be, device[i]);
    } else {
        dp_strategy_free_host_buffer(d, x->host.pieces);
    }
    dp_strategy_free_host_buffer(d, x->message);
    free(x);
    d->state = NULL;
}

/* The gradient backward just wrote (one group's alone) into the accumulator, where it lies; the
 * rank's last group of the step stays in the gradient buffer for finish's passes, which add it
 * as they read: one pass over the accumulator fewer. */
static int exact_add_group(dp_strategy *d, int last)
{
    dp_exact *x = d->state;
    size_t total = d->layout.total;
    if (++x->terms > DP_EXACT_MAX_TERMS)
        return dp_fail(DP_EINVAL, "--exact: more than %zu row groups in one step on one rank; use more rows per group "
                       "(exact:rows=R)", DP_EXACT_MAX_TERMS);
    if (x->terms == 1)
        x->host.beyond = 0.0;
    if (last && !x->on_device) { /* the pending group is read by the sums' passes: its range is known now */
        double beyond = dp_exact_beyond(d->buffers.grads, total);
        x->host.beyond = beyond > x->host.beyond ? beyond : x->host.beyond;
    }
    if (last)
        x->pending = 1;
    else if (x->on_device)
        x->be->exact_add(x->be, x->acc, d->buffers.grads, total, x->terms == 1);
    else
        dp_exact_add(&x->host, d->buffers.grads, x->terms == 1);
    return 0;
}

/* After a step's sums came out not finite: whether some rank's gradients were finite but beyond
 * the sums' range (their sums are NaN too), the largest such value over the ranks named.
 * Collective: every rank found the same sums not finite. A device's adds keep no such record. */
static int exact_explain_nonfinite(dp_strategy *d, char *text, size_t size)
{
    dp_exact *x = d->state;
    uint64_t *ranks = dp_calloc((size_t)d->comm->size, sizeof *ranks, "the ranks' largest values");
    if (!ranks)
        return DP_ENOMEM;
    uint64_t mine;
    memcpy(&mine, &x->host.beyond, sizeof mine); /* positive doubles order as their bits */
    int status = dp_comm_gather_hashes(d->comm, mine, ranks);
    uint64_t largest = 0;
    for (int r = 0; !status && r < d->comm->size; r++)
        largest = ranks[r] > largest ? ranks[r] : largest;
    free(ranks);
    double beyond;
    memcpy(&beyond, &largest, sizeof beyond);
    if (!status && beyond > 0.0)
        snprintf(text, size, "gradient values as large as %.4g, finite but beyond the 2^%d that --exact's sums hold, "
                 "so their sums are NaN (lower the learning rate, or scale the loss down)", beyond,
                 DP_EXACT_INTEGER_BITS);
    else if (!status && x->on_device)
        snprintf(text, size, "under --exact, values of 2^%d or more come out NaN as well", DP_EXACT_INTEGER_BITS);
    return status;
}

/* Whether the accumulator holds a group: not when the pending group is the step's only one. */
static int acc_holds_groups(const dp_exact *x)
{
    return !(x->pending && x->terms == 1);
}

/* The sums on a device and on the host: the accumulator (if it holds groups) and the pending
 * group. */
static dp_exact_sums sums_of(const dp_strategy *d)
{
    const dp_exact *x = d->state;
    return (dp_exact_sums){.acc = acc_holds_groups(x) ? x->acc : NULL, .last = x->pending ? d->buffers.grads : NULL};
}
static dp_exact_host_sums host_sums_of(const dp_strategy *d)
{
    const dp_exact *x = d->state;
    return (dp_exact_host_sums){.acc = acc_holds_groups(x) ? &x->host : NULL,
                                .last = x->pending ? d->buffers.grads : NULL};
}

/* Digits sums of `bits` bits need (all of them where one is not finite: its size is unknown). */
static int digits_needed(const dp_exact *x, int bits, int ranks)
{
    int digits = bits < 0 ? x->max_digits : dp_exact_digits_for(bits, ranks);
    return digits < x->max_digits ? digits : x->max_digits;
}

/* In place: count int64 values of the message summed over the ranks, with c's algorithm. */
static int sum_over_ranks(dp_strategy *d, int64_t *values, size_t count)
{
    double started = MPI_Wtime();
    dp_request_args args = {.kind = DP_ALLREDUCE, .buf = (float *)values, .count = count,
                            .label = "the exact digits", .dtype = DP_DTYPE_I64};
    int status = dp_comm_run(d->comm, &args);
    d->times.busy += MPI_Wtime() - started;
    d->times.requests++;
    return status;
}

/* Digits [first, digits) of this rank's sums into the message (from 0, their magnitude
 * returned): made where the accumulator lives, so a device sends down only the digits, with the
 * sums' size in the same copy. */
static int digits_to_message(dp_strategy *d, int ranks, int first, int digits)
{
    dp_exact *x = d->state;
    size_t total = d->layout.total;
    int64_t *out = message_digits(x);
    if (!x->on_device) {
        if (first == 0)
            return dp_exact_first_digits(host_sums_of(d), total, ranks, digits, out);
        dp_exact_to_digits(host_sums_of(d), total, ranks, first, digits, out);
        return 0;
    }
    int64_t *device_digits = x->digits + 1;
    size_t offset = (size_t)first * total, count = (size_t)(digits - first) * total;
    dp_exact_sums sums = sums_of(d);
    x->be->exact_to_digits(x->be, sums.acc, sums.last, total, dp_exact_digit_bits(ranks), first, digits, device_digits,
                           (uint64_t *)x->digits);
    if (first > 0) {
        x->be->download(x->be, out + offset, device_digits + offset, count * sizeof *out);
        return 0;
    }
    x->be->download(x->be, size_slot(x), x->digits, (1 + count) * sizeof *out);
    uint64_t largest = (uint64_t)*size_slot(x);
    *size_slot(x) = 0;
    return dp_exact_magnitude_of(largest);
}

/* The summed digits in the message back to floats in the gradient buffer (on a device: the
 * digits go up, the floats are made there). */
static void digits_to_gradient(dp_exact *x, size_t total, int ranks, int digits, float *grads)
{
    const int64_t *summed = message_digits(x);
    if (!x->on_device) {
        dp_exact_from_digits(summed, total, ranks, digits, grads);
        return;
    }
    x->be->upload(x->be, x->digits + 1, summed, (size_t)digits * total * sizeof *summed);
    x->be->exact_from_digits(x->be, x->digits + 1, total, dp_exact_digit_bits(ranks), digits, grads);
}

/* Where some rank's sums are not finite (each such rank counted in the message), which ones:
 * each rank's flags summed, then marked in the summed digit 0 (NaN in the gradient). */
static int mark_not_finite(dp_strategy *d, int64_t *flags, int mine)
{
    dp_exact *x = d->state;
    size_t total = d->layout.total;
    if (!mine) /* a rank with marks filled its flags as it sent its digits */
        memset(flags, 0, total * sizeof *flags);
    int status = sum_over_ranks(d, flags, total);
    if (!status)
        dp_exact_put_marks(message_digits(x), total, flags);
    return status;
}

/* The ranks' exact sums added as integers, in one all-reduce where the last step's digit
 * count suffices: beside the digits each rank counts 1 for the digits it needs, so all learn
 * the largest need from the same sums, and only when it exceeds what was sent do the missing
 * digits follow in a second all-reduce. The count sent first follows the need step by step.
 * A rank's sums that are not finite travel as flags: they are counted beside the needs, and a
 * step that has some sends the flags in an all-reduce of their own. */
static int sum_digits(dp_strategy *d)
{
    dp_exact *x = d->state;
    size_t total = d->layout.total;
    int ranks = d->comm->size, sent = x->digits_sent, status;
    int64_t *needs = x->message + NEEDS, *digits = message_digits(x), *flags = digits + (size_t)x->max_digits * total;
    double started = MPI_Wtime();
    int bits = digits_to_message(d, ranks, 0, sent);
    memset(x->message, 0, (size_t)(needs + x->max_digits - x->message) * sizeof *x->message);
    needs[digits_needed(x, bits, ranks) - 1] = 1;
    if (bits < 0) {
        memset(flags, 0, total * sizeof *flags);
        dp_exact_take_marks(digits, total, 0, sent, flags);
        x->message[NOT_FINITE] = 1;
    }
    if ((status = sum_over_ranks(d, x->message, head_of(x) + (size_t)sent * total)))
        return status;
    int needed = x->max_digits;
    while (needs[needed - 1] == 0) /* some rank needs at least one digit */
        needed--;
    if (needed > sent) {
        digits_to_message(d, ranks, sent, needed);
        if (bits < 0)
            dp_exact_take_marks(digits, total, sent, needed, flags);
        if ((status = sum_over_ranks(d, digits + (size_t)sent * total, (size_t)(needed - sent) * total)))
            return status;
    }
    if (x->message[NOT_FINITE] > 0 && (status = mark_not_finite(d, flags, bits < 0)))
        return status;
    digits_to_gradient(x, total, ranks, needed > sent ? needed : sent, d->buffers.grads);
    x->digits_sent = needed;
    if (d->on_span) /* the timeline's one span for the sums: digits, all-reduces, floats */
        d->on_span(d->span_arg, "the exact sums (digits, all-reduce, floats)", started, MPI_Wtime());
    return 0;
}

/* The ranks' exact sums; the gradient buffer gets their float rounding. */
static int exact_finish(dp_strategy *d)
{
    dp_exact *x = d->state;
    size_t total = d->layout.total;
    int status = 0;
    if (x->terms == 0) { /* this rank had no group this step */
        if (x->on_device)
            x->be->zero(x->be, (float *)x->acc, DP_EXACT_PIECES * total * sizeof *x->acc / sizeof(float));
        else
            dp_exact_clear(&x->host);
    }
    if (d->comm->size > 1) {
        if ((status = sum_digits(d)))
            return status;
    } else if (x->on_device) {
        dp_exact_sums sums = sums_of(d);
        x->be->exact_to_floats(x->be, sums.acc, sums.last, total, d->buffers.grads);
    } else {
        dp_exact_to_floats(host_sums_of(d), total, d->buffers.grads);
    }
    x->terms = 0;
    x->pending = 0;
    return 0;
}

static int exact_describe(const dp_strategy *d, char *text, size_t size)
{
    const dp_exact *x = d->state;
    const char *where = x->on_device ? "in device memory" : "in host memory";
    if (d->comm->size == 1)
        return snprintf(text, size, "exact: each group's gradient alone, summed exactly (multiples of 2^-%d) %s on "
                        "one rank", DP_EXACT_FRACTION_BITS, where);
    return snprintf(text, size, "exact: each group's gradient alone, summed exactly (multiples of 2^-%d) %s, then "
                    "one all-reduce of the sums as %d-bit int64 digits (as many as the last step needed, at most "
                    "%d; the rest in a second one when the sums outgrow them)", DP_EXACT_FRACTION_BITS, where,
                    dp_exact_digit_bits(d->comm->size), x->max_digits);
}

/* The smallest group of group rows in a step of step_batch rows or the epoch's last of last_step. */
static size_t smallest_group(size_t group, size_t step_batch, size_t last_step)
{
    size_t smallest = group < last_step ? group : last_step;
    size_t rests[] = {step_batch % group, last_step % group};
    for (size_t i = 0; i < sizeof rests / sizeof *rests; i++)
        smallest = rests[i] && rests[i] < smallest ? rests[i] : smallest;
    return smallest;
}

/* The step cut into groups of the key's rows whatever W (the last may be shorter), this rank
 * taking a contiguous run of them. Each is computed alone (its own BatchNorm statistics,
 * gradients overwritten) so its bits do not depend on the rank; only the step's first group,
 * always rank 0's, moves BatchNorm's running statistics. */
static size_t group_rows_of(const dp_strategy_choice *c)
{
    return (size_t)dp_strategy_key_value(c, "rows");
}

/* --exact all-reduces integer digits that must add exactly. */
static int exact_check(const dp_strategy_choice *c, const dp_strategy_run *run)
{
    if (run->grad_dtype != DP_DTYPE_F32)
        return dp_fail(DP_EINVAL, "%s and --grad-dtype %s: --exact all-reduces its sums as integer digits in floats "
                       "that every algorithm must add exactly, and bf16 would round them (8 significant bits of 24); "
                       "drop one", c->label, dp_grad_dtype_name(run->grad_dtype));
    return 0;
}

/* A BatchNorm normalises over each group, which needs 2 values per feature (rows x H x W); the
 * accumulator's bound holds for so many groups per step. */
static int exact_check_groups(const dp_strategy_choice *c, const dp_strategy_run *run)
{
    size_t rows = group_rows_of(c);
    if (!run->step_batch)
        return 0;
    size_t smallest = smallest_group(rows, run->step_batch, run->last_step);
    if (run->batchnorms && smallest * (size_t)run->statistic_values < 2)
        return dp_fail(DP_EINVAL, "--model '%s' with --exact: a BatchNorm normalises over each row group and needs "
                       "at least 2 values per feature (rows x H x W), but a group of %zu row%s of one value occurs "
                       "(groups of %zu rows, %zu samples per step%s); "
                       "choose other rows per group (exact:rows=R, or --exact-shard R)%s", run->model, smallest,
                       smallest == 1 ? "" : "s", rows, run->step_batch, run->drop_last ? "" : " and the epoch's last step",
                       run->drop_last ? "" : " or --drop-last");
    if ((run->step_batch + rows - 1) / rows > DP_EXACT_MAX_TERMS)
        return dp_fail(DP_EINVAL, "--exact with groups of %zu rows: %zu samples per step make more than %zu groups, "
                       "beyond the exact accumulator's bound; use more rows per group", rows, run->step_batch,
                       DP_EXACT_MAX_TERMS);
    return 0;
}

static dp_range my_groups(const dp_strategy *d, dp_range step)
{
    size_t rows = group_rows_of(&d->config.choice);
    return dp_partition((dp_range_size(step) + rows - 1) / rows, d->comm->size, d->comm->rank);
}

static size_t exact_groups(const dp_strategy *d, dp_range step)
{
    return dp_range_size(my_groups(d, step));
}

static void exact_group(const dp_strategy *d, dp_range step, size_t k, dp_row_group *group)
{
    dp_range mine = my_groups(d, step);
    size_t rows = group_rows_of(&d->config.choice), index = mine.begin + k, begin = step.begin + index * rows;
    *group = (dp_row_group){.rows = {begin, begin + rows < step.end ? begin + rows : step.end}, .alone = 1,
                            .moves_running = index == 0, .last = index + 1 == mine.end,
                            .round_total = dp_exact_round_total, .done_span = "add the group's gradient exactly",
                            .done_category = "exact"};
}

static size_t exact_group_rows(const dp_strategy_choice *c, size_t micro_batch, size_t step_batch, int world)
{
    (void)micro_batch;
    (void)world;
    return group_rows_of(c) < step_batch ? group_rows_of(c) : step_batch;
}

/* Only a step's first group, always rank 0's, moves running statistics, SyncBatchNorm's too. */
static int exact_statistics(int batchnorms, int sync_batchnorms)
{
    (void)sync_batchnorms;
    return batchnorms > 0;
}

static const dp_strategy_key keys[] = {
    {.name = "rows", .metavar = "R", .fallback = 32, .least = 1, .most = 2147483647.0, .whole = 1, .arithmetic = 1,
     .help = "rows per group, whatever the world size; a BatchNorm needs at least 2 in every group (--exact-shard S)"},
};

const dp_strategy_type dp_strategy_exact = {
    .name = "exact",
    .summary = "bitwise the same parameters, losses and checkpoints for every world size, algorithm and --accum: "
               "the step cut into fixed row groups, each computed alone, their gradients summed exactly and "
               "all-reduced as integers; BatchNorm normalises over each group; 1 BLAS thread per rank unless "
               "--threads (--exact; docs/STRATEGIES.md)",
    .keys = keys,
    .key_count = 1,
    .check = exact_check,
    .check_groups = exact_check_groups,
    .groups = exact_groups,
    .group = exact_group,
    .group_rows = exact_group_rows,
    .per_rank_statistics = exact_statistics,
    .any_world = "any (--exact)",
    .sums_on_host = "--exact all-reduces its int64 digits in host memory",
    .blas_threads = 1,
    .blas_threads_why = "--exact's default: OpenBLAS rounds some products differently on more threads",
    .gradient_collective = DP_ALLREDUCE,
    .collective_name = "exact all-reduce",
    .open = exact_open,
    .close = exact_close,
    .working_bytes = exact_working_bytes,
    .group_done = exact_add_group,
    .explain_nonfinite = exact_explain_nonfinite,
    .finish = exact_finish,
    .describe = exact_describe,
};
