/* Stage 3's blocks of whole weight columns under --zero-live-mb. A Linear's input gradient
 * dX = dY W (a Conv2d's dcol = W^T t alike) sums over the out-features; summed over W's row
 * blocks (K = a block's rows, each GEMM adding to the last) its additions are grouped unlike
 * the unsharded GEMM's, so the bits differ. dX's columns [c0, c1) = dY W[:, c0:c1) need W's
 * columns [c0, c1) of every row: rank r's part of them is the pieces of its shard inside
 * those columns, in flat order, so the parts laid end to end in rank order are the block's
 * rows in order. The comm layer all-gathers the blocks of a parent buffer's partition: on 2
 * ranks a parent is found whose two blocks are the parts, and the block is gathered in place;
 * on more, the parts rarely fall so, and each travels padded to the largest one's size in
 * equal blocks, then is moved into place. */
#include "src/strategy/zero_parts.h"

#include "dp/error.h"

#include <stdlib.h>

/* Rank r's part of segment s's weight, as offsets into the weight. */
static dp_range weight_part(const dp_strategy *d, int s, int r)
{
    size_t o = d->layout.offset[s];
    dp_range p = dp_zero_overlap(dp_partition(d->layout.total, d->comm->size, r), o,
                                 d->layout.rows[s] * d->layout.row[s]);
    return (dp_range){p.begin - o, p.end - o};
}

/* The weight rows part touches (in part). */
static size_t rows_touched(dp_range part, size_t width)
{
    return part.end > part.begin ? (part.end - 1) / width - part.begin / width + 1 : 0;
}

typedef void piece_fn(const dp_strategy *d, size_t offset, size_t count, float *into, int host);

/* The pieces of columns [c0, c1) of segment s's weight inside part, in flat order, each given
 * to fn (NULL: only counted) with its flat offset and where it goes in into; returns their
 * floats. */
static size_t walk(const dp_strategy *d, int s, size_t c0, size_t c1, dp_range part, piece_fn *fn, float *into,
                   int host)
{
    size_t width = d->layout.row[s], at = 0;
    for (size_t k = part.begin / width; part.end > part.begin && k * width < part.end; k++) {
        size_t begin = k * width + c0 > part.begin ? k * width + c0 : part.begin;
        size_t end = k * width + c1 < part.end ? k * width + c1 : part.end;
        if (end <= begin)
            continue;
        if (fn)
            fn(d, d->layout.offset[s] + begin, end - begin, into + at, host);
        at += end - begin;
    }
    return at;
}

static size_t columns_end(const dp_strategy *d, int k)
{
    const zero_columns *c = &zero_of(d)->columns;
    int s = c->segment[k];
    size_t end = c->column[k] + c->per[s];
    return end < d->layout.row[s] ? end : d->layout.row[s];
}

/* Every rank's part of column unit k into c->parts; returns the largest. */
static size_t count_parts(const dp_strategy *d, int k)
{
    const zero_columns *c = &zero_of(d)->columns;
    size_t largest = 0;
    for (int r = 0; r < d->comm->size; r++) {
        c->parts[r] = walk(d, c->segment[k], c->column[k], columns_end(d, k), weight_part(d, c->segment[k], r), NULL,
                           NULL, 0);
        largest = c->parts[r] > largest ? c->parts[r] : largest;
    }
    return largest;
}

size_t dp_zero_column_floats(const dp_strategy *d, int k)
{
    const zero_columns *c = &zero_of(d)->columns;
    return d->layout.rows[c->segment[k]] * (columns_end(d, k) - c->column[k]);
}

/* The piece [offset, offset + count) of this rank's parameter shard to into. */
static void copy_from_shard(const dp_strategy *d, size_t offset, size_t count, float *into, int host)
{
    const dp_backend *be = d->buffers.be;
    const float *from = zero_of(d)->param_shard + (offset - zero_of(d)->shard.begin);
    if (host)
        be->download(be, into, from, count * sizeof(float));
    else
        be->accumulate(be, into, from, count, 0);
}

void dp_zero_pack_columns(const dp_strategy *d, int k, float *into, int host)
{
    const zero_columns *c = &zero_of(d)->columns;
    walk(d, c->segment[k], c->column[k], columns_end(d, k), weight_part(d, c->segment[k], d->comm->rank),
         copy_from_shard, into, host);
}

void dp_zero_lay_out_columns(const dp_strategy *d, int k, const float *from, size_t part, float *into, int host)
{
    const dp_backend *be = d->buffers.be;
    const size_t *parts = zero_of(d)->columns.parts;
    count_parts(d, k);
    for (int r = 0; r < d->comm->size; into += parts[r], r++) {
        if (parts[r] && host)
            be->upload(be, into, from + (size_t)r * part, parts[r] * sizeof(float));
        else if (parts[r])
            be->accumulate(be, into, from + (size_t)r * part, parts[r], 0);
    }
}

static int in_place(const dp_strategy *d)
{
    return d->comm->size <= 2;
}

size_t dp_zero_column_layout(const dp_strategy *d, int k, dp_request_args *args, size_t *mine)
{
    const size_t *parts = zero_of(d)->columns.parts;
    size_t largest = count_parts(d, k), n = dp_zero_column_floats(d, k);
    int world = d->comm->size;
    if (!in_place(d)) {
        args->count = (size_t)world * largest;
        *mine = (size_t)d->comm->rank * largest;
        return largest;
    }
    /* Blocks [0, P/2) and [P/2, P) of a parent of P floats, the request [O, O + n) of it: rank
     * 0's block is [O, O + parts[0]) when P/2 = O + parts[0], rank 1's the rest when P >= O + n. */
    args->count = n;
    *mine = d->comm->rank ? parts[0] : 0;
    if (world == 2) {
        args->parent_offset = n > 2 * parts[0] ? n - 2 * parts[0] : 0;
        args->parent_count = 2 * (args->parent_offset + parts[0]);
    }
    return 0;
}

size_t dp_zero_column_need(const dp_strategy *d, int s)
{
    size_t most = 0, width = d->layout.row[s];
    for (int r = 0; r < d->comm->size && !in_place(d); r++) {
        size_t rows = rows_touched(weight_part(d, s, r), width);
        most = rows > most ? rows : most;
    }
    return d->layout.rows[s] + (size_t)d->comm->size * most;
}

/* Columns per block of segment s's weight for slots of slot_floats. */
static size_t columns_per_block(const dp_strategy *d, int s, size_t slot_floats)
{
    size_t per = slot_floats / dp_zero_column_need(d, s);
    return per < d->layout.row[s] ? per : d->layout.row[s];
}

int dp_zero_plan_columns(const dp_strategy *d, size_t slot_floats, zero_columns *c)
{
    int segments = d->layout.segments;
    c->first = malloc((size_t)(segments ? segments : 1) * sizeof *c->first);
    c->per = calloc((size_t)(segments ? segments : 1), sizeof *c->per);
    c->parts = calloc((size_t)d->comm->size, sizeof *c->parts);
    if (!c->first || !c->per || !c->parts)
        return dp_fail(DP_ENOMEM, "out of memory for the plan of column blocks");
    c->units = 0;
    for (int s = 0; s < segments; s++) {
        c->first[s] = -1;
        int has_rows = d->layout.row && d->layout.row[s];
        if (!dp_zero_segment_is_cut(d, s) || !has_rows || !(c->per[s] = columns_per_block(d, s, slot_floats)))
            continue;
        c->first[s] = c->units;
        c->units += (int)((d->layout.row[s] + c->per[s] - 1) / c->per[s]);
    }
    c->segment = malloc((size_t)(c->units ? c->units : 1) * sizeof *c->segment);
    c->column = malloc((size_t)(c->units ? c->units : 1) * sizeof *c->column);
    if (!c->segment || !c->column)
        return dp_fail(DP_ENOMEM, "out of memory for the plan of column blocks");
    for (int s = 0, k = 0; s < segments; s++)
        for (size_t column = 0; c->first[s] >= 0 && column < d->layout.row[s]; column += c->per[s], k++) {
            c->segment[k] = s;
            c->column[k] = column;
        }
    return 0;
}

void dp_zero_free_columns(zero_columns *c)
{
    free(c->first);
    free(c->per);
    free(c->parts);
    free(c->segment);
    free(c->column);
}
