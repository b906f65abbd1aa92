/* Running one row of the backend test table: operands uploaded to each backend, the operation
 * run, outputs downloaded and compared with the reference and with the first backend's. */
#include "dp/error.h"
#include "tests/ops/op_table.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtype_name[] = {[OP_DTYPE_F32] = "f32", [OP_DTYPE_I32] = "i32"};

static const size_t type_size[] = {[OP_F32] = sizeof(float), [OP_F64] = sizeof(double),
                                   [OP_I32] = sizeof(int32_t), [OP_INDEX] = sizeof(size_t),
                                   [OP_U64] = sizeof(uint64_t)};

static void *checked_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size);
    ck_assert_ptr_nonnull(p);
    return p;
}

static op_operand *add_operand(op_run *r, op_type type, size_t count)
{
    ck_assert_int_lt(r->count, OP_MAX_OPERANDS);
    op_operand *o = &r->arg[r->count++];
    *o = (op_operand){.type = type, .count = count, .host = checked_calloc(count, type_size[type])};
    return o;
}

void *op_input(op_run *r, op_type type, size_t count)
{
    return add_operand(r, type, count)->host;
}

void *op_output(op_run *r, op_type type, size_t count, op_agreement agreement)
{
    op_operand *o = add_operand(r, type, count);
    o->output = 1;
    o->agreement = agreement;
    return o->host;
}

double *op_scaled(op_run *r, int index)
{
    op_operand *o = &r->arg[index];
    if (!o->scale)
        o->scale = checked_calloc(o->count, sizeof(double));
    return o->scale;
}

float *op_fill_f32(float *x, size_t n, op_fill fill, float scale, dp_rng *rng)
{
    static const float specials[] = {NAN,  INFINITY, -INFINITY, 0.0f,     -0.0f,   1e-40f,
                                     -3e-39f, 1e-45f, FLT_MAX,   -FLT_MIN, -NAN,    1.0f + FLT_EPSILON};
    size_t kinds = sizeof specials / sizeof *specials;
    for (size_t i = 0; i < n; i++) {
        float u = dp_rng_uniform(rng), v = dp_rng_uniform(rng);
        x[i] = fill == FILL_POSITIVE ? scale * (0.5f + 0.5f * u) : scale * (2.0f * u - 1.0f);
        /* one value in five, at random, so two operands meet special against special too */
        if (fill == FILL_HOSTILE && v < 0.2f)
            x[i] = specials[(size_t)(v * 5.0f * (float)kinds) % kinds];
    }
    return x;
}

float *op_input_f32(op_run *r, size_t n, op_fill fill, float scale)
{
    return op_fill_f32(op_input(r, OP_F32, n), n, fill, scale, &r->rng);
}

float *op_output_f32(op_run *r, size_t n, op_fill fill, float scale, op_agreement agreement)
{
    return op_fill_f32(op_output(r, OP_F32, n, agreement), n, fill, scale, &r->rng);
}

static void free_run(op_run *r, const dp_backend *be)
{
    for (int i = 0; i < r->count; i++) {
        if (r->arg[i].device)
            be->free(be, r->arg[i].device);
        free(r->arg[i].host);
        free(r->arg[i].scale);
        free(r->arg[i].got);
    }
    r->count = 0;
}

/* The operands in backend memory, the operation, the outputs back on the host. */
static void run_on(const op_backend *b, const op_case *c, op_run *r)
{
    for (int i = 0; i < r->count; i++) {
        op_operand *o = &r->arg[i];
        size_t bytes = o->count * type_size[o->type];
        o->device = b->be->alloc(b->be, bytes, DP_MEM_OTHER, "a test operand");
        ck_assert_msg(o->device != NULL, "%s on %s: %s", c->op, b->label, dp_last_error());
        b->be->upload(b->be, o->device, o->host, bytes);
    }
    c->impl->run(b->be, r);
    for (int i = 0; i < r->count; i++) {
        op_operand *o = &r->arg[i];
        if (!o->output)
            continue;
        o->got = checked_calloc(o->count, type_size[o->type]);
        b->be->download(b->be, o->got, o->device, o->count * type_size[o->type]);
    }
}

static double value_at(const op_operand *o, const void *data, size_t i)
{
    switch (o->type) {
    case OP_F32:
        return ((const float *)data)[i];
    case OP_F64:
        return ((const double *)data)[i];
    case OP_I32:
        return ((const int32_t *)data)[i];
    case OP_INDEX:
        return (double)((const size_t *)data)[i];
    case OP_U64:
        return (double)((const uint64_t *)data)[i];
    }
    return 0.0;
}

/* The same bits, except that any NaN equals any NaN (payloads are no backend's promise). */
static int same_bits(const op_operand *o, const void *a, const void *b, size_t i)
{
    size_t size = type_size[o->type];
    if (memcmp((const char *)a + i * size, (const char *)b + i * size, size) == 0)
        return 1;
    return (o->type == OP_F32 || o->type == OP_F64) && isnan(value_at(o, a, i)) && isnan(value_at(o, b, i));
}

static int within(const op_operand *o, const op_tolerance *t, size_t i)
{
    double got = value_at(o, o->got, i), want = value_at(o, o->host, i);
    double allowed = t->abs + t->rel * fabs(want) + (o->scale ? t->per_term * o->scale[i] : 0.0);
    if (o->exact || allowed == 0.0 || !isfinite(want))
        return same_bits(o, o->got, o->host, i) || (isnan(got) && isnan(want));
    return fabs(got - want) <= allowed;
}

static const char *shape_text(const op_shape *s)
{
    static char text[64];
    snprintf(text, sizeof text, "[%d, %d] (inner %d)", s->rows, s->cols, s->inner);
    return text;
}

static void compare(const op_case *c, const op_shape *s, const op_backend *b, const op_run *r, const op_run *first)
{
    for (int i = 0; i < r->count; i++) {
        const op_operand *o = &r->arg[i];
        if (!o->output)
            continue;
        for (size_t k = 0; k < o->count; k++) {
            if (!within(o, &c->tol, k))
                ck_abort_msg("%s (%s, %s) %s on %s: output %d element %zu is %a, the reference %a", c->op, c->variant,
                             dtype_name[c->dtype], shape_text(s), b->label, i, k, value_at(o, o->got, k),
                             value_at(o, o->host, k));
            int must_match = o->agreement == SAME_BITS_EVERYWHERE || (o->agreement == SAME_BITS_ON_CPU && b->on_cpu);
            if (first && must_match && !same_bits(o, o->got, first->arg[i].got, k))
                ck_abort_msg("%s (%s, %s) %s on %s: output %d element %zu is %a, on the first backend %a", c->op,
                             c->variant, dtype_name[c->dtype], shape_text(s), b->label, i, k, value_at(o, o->got, k),
                             value_at(o, first->arg[i].got, k));
        }
    }
}

static void prepare(const op_case *c, const op_shape *s, uint64_t seed, op_run *r)
{
    *r = (op_run){.shape = *s, .param = c->param};
    dp_rng_seed(&r->rng, seed);
    c->impl->prepare(r);
}

void op_check_case(const op_case *c, const op_backend *backends, int count)
{
    for (int k = 0; c->shapes[k].rows >= 0; k++) {
        const op_shape *s = &c->shapes[k];
        uint64_t seed = 1000u * (uint64_t)(c->param + 1) + (uint64_t)k;
        op_run first;
        for (int b = 0; b < count; b++) {
            op_run r;
            prepare(c, s, seed, &r);
            if (backends[b].use)
                backends[b].use(&backends[b]);
            run_on(&backends[b], c, &r);
            c->impl->reference(&r);
            compare(c, s, &backends[b], &r, b ? &first : NULL);
            if (b)
                free_run(&r, backends[b].be);
            else
                first = r;
        }
        free_run(&first, backends[0].be);
    }
}
