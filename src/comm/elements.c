/* What a reduction sends and adds: float32, or bfloat16 for --grad-dtype bf16. A bf16
 * request rounds its float buffer to bf16 in place at the start (round to nearest even, the
 * values packed into the buffer's first half), sends and adds bf16 values, and widens the
 * result back to float at completion: half the bytes on the wire. Every addition of two bf16
 * values is formed in float32 and rounded to bf16 again, as NCCL's bf16 reductions do at each
 * step, so a sum over W ranks carries at most about log2(W) (tree) or W-1 (chain, ring)
 * roundings of 2^-8 relative each (docs/ALGORITHMS.md, "bf16 gradients"). */
#include "src/comm/request.h"

#include <string.h>

uint16_t dp_bf16_from_float(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN: stays a (quiet) NaN, never rounds to infinity */
        return (uint16_t)((bits >> 16) | 0x40u);
    /* Round to nearest, ties to even: add half an ulp of bf16, less one when the kept bit is 0.
     * Finite values beyond bf16's largest round to infinity, as they must. */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

float dp_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static void add_bf16(void *into, const void *from, size_t count)
{
    uint16_t *restrict dst = into;
    const uint16_t *restrict src = from;
    for (size_t i = 0; i < count; i++)
        dst[i] = dp_bf16_from_float(dp_bf16_to_float(dst[i]) + dp_bf16_to_float(src[i]));
}

static void add_f32(void *into, const void *from, size_t count)
{
    dp_add_floats(into, from, count);
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

/* In place, front to back: element i's two bytes land at or below where float i was read.
 * Through memcpy, as the same bytes are read as one type and written as the other. */
static void narrow(void *buf, size_t count)
{
    char *bytes = buf;
    for (size_t i = 0; i < count; i++) {
        float x;
        memcpy(&x, bytes + i * sizeof x, sizeof x);
        uint16_t h = dp_bf16_from_float(x);
        memcpy(bytes + i * sizeof h, &h, sizeof h);
    }
}

/* In place, back to front: float i's four bytes cover only elements >= i, already read. */
static void widen(void *buf, size_t count)
{
    char *bytes = buf;
    for (size_t i = count; i-- > 0;) {
        uint16_t h;
        memcpy(&h, bytes + i * sizeof h, sizeof h);
        float x = dp_bf16_to_float(h);
        memcpy(bytes + i * sizeof x, &x, sizeof x);
    }
}

/* I64 has no entry (size 0): requests refuse it. */
const dp_element dp_elements[DP_DTYPES] = {
    [DP_DTYPE_F32] = {.size = sizeof(float), .name = "float32", .add = add_f32},
    [DP_DTYPE_BF16] = {.size = sizeof(uint16_t), .name = "bfloat16", .add = add_bf16, .narrow = narrow,
                       .widen = widen, .own_sum = 1},
};

MPI_Datatype dp_element_mpi_type(dp_dtype dtype)
{
    return dtype == DP_DTYPE_BF16 ? MPI_UINT16_T : MPI_FLOAT;
}
