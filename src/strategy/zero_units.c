/* What ZeRO stages 2 and 3 gather and reduce under --zero-live-mb: units of at most a block
 * of floats. A segment that fits is one unit; a larger one is cut in blocks of whole rows
 * counted from its end (as a Linear computes its weight gradient), its tail (the bias) a unit
 * of its own, so a module's pieces and the units are the same slices. Also what the stages ask
 * of units and segments: the part of a range in a shard, the unit at an offset, whether a
 * segment is cut. */
#include "src/strategy/zero_parts.h"

#include "dp/error.h"

#include <math.h>
#include <stdint.h>

/* Working buffers one block each: the gradient slots, and stage 3's gather slots. */
int dp_zero_block_slots(const dp_strategy_type *type, const dp_strategy_config *config)
{
    int slots = config->overlap ? ZERO_GRAD_SLOTS : 1;
    return slots + (type->shards_params ? (config->overlap ? ZERO_GATHER_SLOTS : 1) : 0);
}

double dp_strategy_live_mb(const dp_strategy_config *config, size_t total, int world)
{
    double live_mb = dp_strategy_key_value(&config->choice, "live-mb");
    if (isnan(live_mb))
        return 0.0;
    if (live_mb >= 0.0)
        return live_mb;
    double mb = DP_ZERO_LIVE_SHARE * 16.0 * (double)total / (world > 0 ? world : 1) / (1 << 20);
    return mb > DP_ZERO_LIVE_MIN_MB ? mb : DP_ZERO_LIVE_MIN_MB;
}

size_t dp_strategy_block_floats(const dp_strategy_type *type, const dp_strategy_config *config, size_t total,
                                int world)
{
    double mb = dp_strategy_live_mb(config, total, world);
    if (!type->shards_grads || mb == 0.0)
        return SIZE_MAX;
    double floats = mb * MIB_FLOATS / dp_zero_block_slots(type, config);
    return floats >= 1.0 ? (size_t)floats : 1;
}

double dp_zero_least_mb(size_t floats, int slots)
{
    /* Printed with 6 decimals and rounded up, then checked as dp_strategy_block_floats reads it. */
    double mb = ceil((double)floats * slots / MIB_FLOATS * 1e6) / 1e6;
    while ((size_t)(mb * MIB_FLOATS / slots) < floats)
        mb += 1e-6;
    return mb;
}

static int too_small(const dp_strategy_layout *l, int s, size_t block, const dp_strategy_config *config,
                     const dp_strategy_type *type)
{
    size_t row = l->row ? l->row[s] : 0, rows = row ? l->rows[s] : 0;
    size_t tail = l->count[s] - rows * row, need = row > tail ? row : tail;
    if (!row)
        return dp_fail(DP_EINVAL, "--zero-live-mb: the parameters [%zu, %zu) of one module are larger than a block of "
                       "the budget (%zu floats) and cannot be cut in rows; give at least %.6f MiB", l->offset[s],
                       l->offset[s] + l->count[s], block, dp_zero_least_mb(l->count[s], dp_zero_block_slots(type, config)));
    return dp_fail(DP_EINVAL, "--zero-live-mb: a block of the budget (%zu floats) is smaller than a row (%zu floats) "
                   "or the bias (%zu) of the layer whose parameters are [%zu, %zu); give at least %.6f MiB", block, row,
                   tail, l->offset[s], l->offset[s] + l->count[s], dp_zero_least_mb(need, dp_zero_block_slots(type, config)));
}

static void set_unit(dp_strategy_units *u, int n, size_t offset, size_t count, int segment)
{
    if (!u->offset)
        return;
    u->offset[n] = offset;
    u->count[n] = count;
    u->segment[n] = segment;
}

int dp_strategy_plan_units(const dp_strategy_layout *l, const dp_strategy_type *type, const dp_strategy_config *config,
                           size_t block, size_t piece, dp_strategy_units *u)
{
    int n = 0;
    for (int s = 0; s < l->segments; s++) {
        if (u->first)
            u->first[s] = n;
        size_t row = l->row ? l->row[s] : 0, rows = row ? l->rows[s] : 0;
        size_t tail = l->count[s] - rows * row, per = row && row <= block ? (piece > row ? piece / row : 1) : 0;
        if (l->count[s] <= block) {
            set_unit(u, n++, l->offset[s], l->count[s], s);
            continue;
        }
        if (!per || tail > block)
            return too_small(l, s, block, config, type);
        /* Blocks from the end, listed in ascending offsets: the first is the short one. */
        size_t blocks = (rows + per - 1) / per;
        for (size_t j = blocks; j-- > 0; n++) {
            size_t end = rows - j * per, first = end > per ? end - per : 0;
            set_unit(u, n, l->offset[s] + first * row, (end - first) * row, s);
        }
        if (tail)
            set_unit(u, n++, l->offset[s] + rows * row, tail, s);
    }
    return n;
}

dp_range dp_zero_overlap(dp_range range, size_t offset, size_t count)
{
    size_t begin = range.begin > offset ? range.begin : offset;
    size_t end = range.end < offset + count ? range.end : offset + count;
    return (dp_range){begin, end > begin ? end : begin};
}

int dp_zero_unit_at(const dp_strategy_units *u, size_t offset)
{
    int lo = 0, hi = u->layout.segments - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (u->offset[mid] <= offset)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int dp_zero_segment_is_cut(const dp_strategy *d, int segment)
{
    return d->layout.count[segment] > d->block_floats;
}

/* The units of d's layout cut in pieces of `piece` floats where a segment exceeds the block:
 * counted, then listed. */
static int plan_unit_set(dp_strategy *d, size_t piece, dp_strategy_units *u)
{
    const dp_strategy_layout *l = &d->layout;
    int n = dp_strategy_plan_units(l, d->type, &d->config, d->block_floats, piece, &(dp_strategy_units){0});
    int status = n < 0 ? n : dp_strategy_alloc_units(u, n, l->segments);
    if (!status)
        dp_strategy_plan_units(l, d->type, &d->config, d->block_floats, piece, u);
    u->layout = (dp_strategy_layout){.segments = n, .offset = u->offset, .count = u->count, .total = l->total};
    return status;
}

int dp_zero_plan_units(dp_strategy *d, int world)
{
    d->block_floats = dp_strategy_block_floats(d->type, &d->config, d->layout.total, world);
    size_t ddp = dp_strategy_ddp_piece(d, world);
    /* Under a budget, no piece larger than its block. */
    d->piece_floats = d->block_floats == SIZE_MAX ? ddp : ddp && ddp < d->block_floats ? ddp : d->block_floats;
    int status = plan_unit_set(d, d->block_floats, &d->gathers);
    return status ? status : plan_unit_set(d, d->piece_floats, &d->grads);
}
