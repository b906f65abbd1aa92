/* What a reduction sends and adds: float32, bfloat16 for --grad-dtype bf16, or int64 (--exact's
 * digits: integer sums are exact, so every algorithm gives the same bits in any order). A bf16
 * request rounds its float buffer to bf16 in place at the start (round to nearest even, the
 * values packed into the buffer's first half), sends and adds bf16 values, and widens the
 * result back to float at completion: half the bytes on the wire. Every addition of two bf16
 * values is formed in float32 and rounded to bf16 again, as NCCL's bf16 reductions do at each
 * step, so a sum over W ranks carries at most about log2(W) (tree) or W-1 (chain, ring)
 * roundings of 2^-8 relative each (docs/ALGORITHMS.md, "bf16 gradients"). */
#include "src/comm/request.h"

#include "src/backend/kernel_math.h"

#include <stdint.h>
#include <string.h>

/* The rounding the GPU's conversion kernels apply too (nccl's bf16 path). */
uint16_t dp_bf16_from_float(float x)
{
    return dp_bf16_bits(x);
}

float dp_bf16_to_float(uint16_t h)
{
    return dp_bf16_value(h);
}

/* A fixed inner trip count: GCC vectorizes it at -O2, whose cost model skips loops that would
 * need a scalar remainder (measured here: 2x the scalar loop). Each element is one addition,
 * so the result is the same bits either way. */
enum { LANES = 16 };

void dp_add_floats(float *restrict dst, const float *restrict src, size_t count)
{
    size_t bulk = count - count % LANES;
    for (size_t i = 0; i < bulk; i += LANES)
        for (size_t k = 0; k < LANES; k++)
            dst[i + k] += src[i + k];
    for (size_t i = bulk; i < count; i++)
        dst[i] += src[i];
}

static void add_bf16(void *into, const void *from, size_t count)
{
    uint16_t *restrict dst = into;
    const uint16_t *restrict src = from;
    size_t bulk = count - count % LANES;
    for (size_t i = 0; i < bulk; i += LANES)
        for (size_t k = 0; k < LANES; k++)
            dst[i + k] = dp_bf16_bits(dp_bf16_value(dst[i + k]) + dp_bf16_value(src[i + k]));
    for (size_t i = bulk; i < count; i++)
        dst[i] = dp_bf16_bits(dp_bf16_value(dst[i]) + dp_bf16_value(src[i]));
}

static void add_f32(void *into, const void *from, size_t count)
{
    dp_add_floats(into, from, count);
}

/* Added as unsigned: two's complement wraps instead of overflowing (undefined for int64_t), and a
 * sum that fits in int64 comes out right whatever its partial sums did. */
static void add_i64(void *into, const void *from, size_t count)
{
    uint64_t *restrict dst = into;
    const uint64_t *restrict src = from;
    for (size_t i = 0; i < count; i++)
        dst[i] += src[i];
}

/* MPI's form of add_bf16 for --allreduce mpi: a user-defined operation on MPI_UINT16_T. */
static void mpi_add_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    add_bf16(inout, in, (size_t)*len);
}

int dp_bf16_sum_create(MPI_Op *op)
{
    DP_MPI_CHECK(MPI_Op_create(mpi_add_bf16, 1 /* commutative: a + b rounds as b + a */, op));
    return 0;
}

/* LANES elements of either width: a run is read as one and written as the other. */
typedef union lanes {
    float f32[LANES];
    uint16_t bf16[LANES];
} lanes;

static void narrow_lanes(const lanes *in, lanes *out)
{
    for (size_t k = 0; k < LANES; k++)
        out->bf16[k] = dp_bf16_bits(in->f32[k]);
}

static void widen_lanes(const lanes *in, lanes *out)
{
    for (size_t k = 0; k < LANES; k++)
        out->f32[k] = dp_bf16_value(in->bf16[k]);
}

/* In place, in runs of up to LANES elements through local copies (the same bytes are read as
 * one width and written as the other). Narrowing goes front to back: a run's bf16 values land
 * below the floats of every later run; widening back to front: a run's floats land above the
 * bf16 values of every earlier run. */
static void convert(char *bytes, size_t count, size_t from_size, size_t to_size,
                    void (*convert_lanes)(const lanes *, lanes *))
{
    size_t runs = (count + LANES - 1) / LANES;
    for (size_t r = 0; r < runs; r++) {
        size_t i = (to_size < from_size ? r : runs - 1 - r) * LANES;
        size_t n = count - i < LANES ? count - i : LANES;
        lanes in = {{0}}, out;
        memcpy(&in, bytes + i * from_size, n * from_size);
        convert_lanes(&in, &out);
        memcpy(bytes + i * to_size, &out, n * to_size);
    }
}

static void narrow(void *buf, size_t count)
{
    convert(buf, count, sizeof(float), sizeof(uint16_t), narrow_lanes);
}

static void widen(void *buf, size_t count)
{
    convert(buf, count, sizeof(uint16_t), sizeof(float), widen_lanes);
}

const dp_element dp_elements[DP_DTYPES] = {
    [DP_DTYPE_F32] = {.size = sizeof(float), .name = "float32", .add = add_f32},
    [DP_DTYPE_I64] = {.size = sizeof(int64_t), .name = "int64", .add = add_i64},
    [DP_DTYPE_BF16] = {.size = sizeof(uint16_t), .name = "bfloat16", .add = add_bf16, .narrow = narrow,
                       .widen = widen, .own_sum = 1},
};

MPI_Datatype dp_element_mpi_type(dp_dtype dtype)
{
    /* bf16 travels as its bits: MPI adds it with the pool's own operation (dp_bf16_sum_create). */
    const MPI_Datatype types[DP_DTYPES] = {[DP_DTYPE_F32] = MPI_FLOAT, [DP_DTYPE_I64] = MPI_INT64_T,
                                           [DP_DTYPE_BF16] = MPI_UINT16_T};
    return types[dtype];
}
