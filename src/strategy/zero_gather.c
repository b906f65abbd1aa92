/* ZeRO stage 3's parameter gathers (zero.c has the stage): working slots that hold a unit of
 * the parameters gathered whole (a module, a block of a cut weight's rows, or of its columns,
 * zero_columns.c), the order a pass reads them in and the next one prefetched, the fetch hooks
 * a cut module reads its blocks through, and the slots forgotten after the update. */
#include "src/strategy/zero_parts.h"

#include "dp/error.h"
#include "dp/zero_plan.h"

#include <math.h>
#include <stdio.h>

void dp_zero_count_wait(dp_strategy *d, double entered)
{
    double spent = MPI_Wtime() - entered;
    d->times.exposed += spent;
    *(zero_of(d)->backward ? &d->times.in_backward : &d->times.in_forward) += spent;
}

static zero_gather_slot *holding(struct dp_zero *z, int unit)
{
    for (int i = 0; i < z->gather_slots; i++)
        if (z->gathers[i].unit == unit)
            return &z->gathers[i];
    return NULL;
}

static int is_column_unit(const dp_strategy *d, int unit)
{
    return unit >= d->gathers.layout.segments;
}

/* Where column unit k's all-gather runs in slot g: its host copy, else the packed block at the
 * slot's start or, gathered padded, past it. */
static float *column_buffer(const dp_strategy *d, const zero_gather_slot *g, int k)
{
    return g->host ? g->host : g->base + (g->part ? dp_zero_column_floats(d, k) : 0);
}

/* Starts the all-gather of column unit `unit` into slot g, this rank's part packed in. */
static int start_column_gather(dp_strategy *d, zero_gather_slot *g, int unit)
{
    int k = unit - d->gathers.layout.segments;
    size_t mine;
    dp_request_args args = {.kind = DP_ALLGATHER, .label = g->label};
    g->data = g->base;
    g->part = dp_zero_column_layout(d, k, &args, &mine);
    args.buf = column_buffer(d, g, k);
    dp_zero_pack_columns(d, k, args.buf + mine, g->host != NULL);
    g->unit = unit;
    g->started_at = MPI_Wtime();
    snprintf(g->label, sizeof g->label, "parameters of column unit %d", k);
    return dp_comm_start(d->comm, &args, &g->request);
}

/* Starts the all-gather of unit's parameters into slot g: this rank's part copied in, the
 * others' arriving (each rank's block of the unit is its shard's part of it). */
static int start_gather(dp_strategy *d, zero_gather_slot *g, int unit)
{
    if (is_column_unit(d, unit))
        return start_column_gather(d, g, unit);
    struct dp_zero *z = zero_of(d);
    const dp_backend *be = d->buffers.be;
    size_t offset = d->gathers.offset[unit], count = d->gathers.count[unit];
    dp_range mine = dp_zero_overlap(z->shard, offset, count);
    size_t n = dp_range_size(mine);
    const float *source = z->param_shard + (mine.begin - z->shard.begin);
    g->data = dp_zero_aligned_like(g->base, offset);
    float *buf = g->host ? g->host : g->data;
    if (n && g->host)
        be->download(be, g->host + (mine.begin - offset), source, n * sizeof(float));
    else if (n)
        be->accumulate(be, g->data + (mine.begin - offset), source, n, 0);
    g->unit = unit;
    g->started_at = MPI_Wtime();
    snprintf(g->label, sizeof g->label, "the parameters of unit %d", unit);
    dp_request_args args = {.kind = DP_ALLGATHER, .buf = buf, .count = count, .label = g->label,
                            .parent_count = d->layout.total, .parent_offset = offset};
    return dp_comm_start(d->comm, &args, &g->request);
}

static int finish_gather(dp_strategy *d, zero_gather_slot *g)
{
    if (!g->request)
        return 0;
    int status = dp_request_wait(&g->request);
    if (status)
        return status;
    double done = MPI_Wtime();
    int k = g->unit - d->gathers.layout.segments, columns = is_column_unit(d, g->unit);
    if (columns && g->part)
        dp_zero_lay_out_columns(d, k, column_buffer(d, g, k), g->part, g->data, g->host != NULL);
    else if (g->host)
        d->buffers.be->upload(d->buffers.be, g->data, g->host,
                           (columns ? dp_zero_column_floats(d, k) : d->gathers.count[g->unit]) * sizeof(float));
    d->times.busy += done - g->started_at;
    if (d->on_span)
        d->on_span(d->span_arg, g->label, g->started_at, done);
    return 0;
}

/* A slot other than `keep` for a new gather (an empty one if there is), its own gather (a
 * prefetch) completed first. */
static int free_gather_slot(dp_strategy *d, const zero_gather_slot *keep, zero_gather_slot **out)
{
    zero_gather_slot *g = NULL;
    for (int i = zero_of(d)->gather_slots - 1; i >= 0; i--) {
        zero_gather_slot *candidate = &zero_of(d)->gathers[i];
        if (candidate != keep && (!g || candidate->unit < 0))
            g = candidate;
    }
    *out = g;
    return finish_gather(d, g);
}

int dp_zero_gathered(dp_strategy *d, int unit, zero_gather_slot **slot)
{
    zero_gather_slot *g = holding(zero_of(d), unit);
    int status = 0;
    if (!g && !(status = free_gather_slot(d, NULL, &g)))
        status = start_gather(d, g, unit);
    if (!status)
        status = finish_gather(d, g);
    *slot = g;
    return status;
}

/* The unit backward reads first of segment s: its first column block where it is cut (none
 * where a column does not fit), else its one unit. */
static int first_in_backward(const dp_strategy *d, int s)
{
    int first = zero_of(d)->columns.first[s];
    if (!dp_zero_segment_is_cut(d, s))
        return d->gathers.first[s];
    return first >= 0 ? d->gathers.layout.segments + first : -1;
}

/* The unit backward reads after `unit` (-1: none): the next column block of its weight, or
 * the segment before's first. */
static int next_in_backward(const dp_strategy *d, int unit)
{
    const zero_columns *c = &zero_of(d)->columns;
    int k = unit - d->gathers.layout.segments, s;
    if (!is_column_unit(d, unit))
        s = d->gathers.segment[unit];
    else if (k + 1 < c->units && c->segment[k + 1] == c->segment[k])
        return unit + 1;
    else
        s = c->segment[k];
    return s > 0 ? first_in_backward(d, s - 1) : -1;
}

int dp_zero_gather_with_prefetch(dp_strategy *d, int unit, int backward, zero_gather_slot **slot)
{
    zero_gather_slot *spare;
    int status = dp_zero_gathered(d, unit, slot);
    int next = backward ? next_in_backward(d, unit) : unit + 1;
    int prefetch = zero_of(d)->gather_slots > 1 && next >= 0 && (backward || next < d->gathers.layout.segments);
    if (!status && prefetch && !holding(zero_of(d), next) && !(status = free_gather_slot(d, *slot, &spare)))
        status = start_gather(d, spare, next);
    return status;
}

/* Unit's parameters at *data for a module's pass, the wait counted as communication. */
static int fetch_unit(dp_strategy *d, int unit, const float **data)
{
    zero_gather_slot *g;
    double entered = MPI_Wtime();
    int status = dp_zero_gather_with_prefetch(d, unit, zero_of(d)->backward, &g);
    dp_zero_count_wait(d, entered);
    *data = status ? NULL : g->data;
    return status;
}

/* A cut segment's module reads its parameters unit by unit (dp_param_pieces). */
int dp_zero_fetch(void *arg, size_t offset, size_t count, const float **data)
{
    dp_strategy *d = arg;
    int unit = dp_zero_unit_at(&d->gathers, offset);
    if (d->gathers.offset[unit] != offset || d->gathers.count[unit] != count)
        return dp_fail(DP_EINVAL, "parameters [%zu, %zu) asked for are not a unit of the budget's plan", offset,
                       offset + count);
    return fetch_unit(d, unit, data);
}

/* A cut weight's module reads it in blocks of whole columns for its input gradient (backward). */
int dp_zero_fetch_columns(void *arg, size_t offset, size_t first, size_t *end, const float **data)
{
    dp_strategy *d = arg;
    const zero_columns *c = &zero_of(d)->columns;
    int s = d->gathers.segment[dp_zero_unit_at(&d->gathers, offset)];
    size_t rows = d->layout.rows[s], width = d->layout.row ? d->layout.row[s] : 0;
    if (d->layout.offset[s] != offset || !dp_zero_segment_is_cut(d, s) || !width)
        return dp_fail(DP_EINVAL, "columns of parameters at %zu asked for are not of a weight the budget cuts", offset);
    if (!c->per[s]) { /* the least budget rounded up, so that giving it works */
        double mb = dp_zero_least_mb(dp_zero_column_need(d, s) + width, dp_zero_block_slots(d->type, &d->config));
        return dp_fail(DP_EINVAL, "--zero-live-mb: a gathered block (%zu floats) is smaller than a column of the "
                       "layer whose parameters are [%zu, %zu) (%zu floats: %zu rows%s); give at least %.6f MiB",
                       zero_of(d)->unit_floats, offset, offset + d->layout.count[s], dp_zero_column_need(d, s), rows,
                       d->comm->size > 2 ? " and every rank's part padded to the largest" : "", mb);
    }
    if (first % c->per[s] || first >= width)
        return dp_fail(DP_EINVAL, "columns from %zu of the weight at %zu are not a block of the budget's plan", first,
                       offset);
    *end = first + c->per[s] < width ? first + c->per[s] : width;
    return fetch_unit(d, d->gathers.layout.segments + c->first[s] + (int)(first / c->per[s]), data);
}

int dp_zero_forget_gathered(dp_strategy *d)
{
    struct dp_zero *z = zero_of(d);
    int status = 0;
    for (int i = 0; !status && i < z->gather_slots; i++) {
        status = finish_gather(d, &z->gathers[i]);
        z->gathers[i].unit = -1;
    }
    int prefetch = z->gather_slots > 1 && d->gathers.layout.segments > 0;
    return status || !prefetch ? status : start_gather(d, &z->gathers[0], 0);
}
