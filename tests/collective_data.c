#include "tests/collective_data.h"

#include "dp/error.h"
#include "dp/rng.h"
#include "tests/testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GUARD = 8 };
#define SENTINEL (-7777.25f) /* marks the floats after the buffer: none may change */

int world_rank, world_size;

void counts_for_world(size_t counts[COUNT_CASES])
{
    size_t w = (size_t)world_size;
    const size_t list[COUNT_CASES] = {0, 1, w - 1, w, w + 1, 1000003, (size_t)1 << 20};
    memcpy(counts, list, sizeof list);
}

int all_ok(int ok)
{
    int every = 0;
    MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return every;
}

float exact_value(int rank, size_t i)
{
    return (float)(((size_t)rank * 7 + i) % 13) - 6.0f;
}

float owned_value(int owner, size_t i)
{
    return (float)(owner * 1000 + (int)(i % 977));
}

float *guarded(size_t count)
{
    float *buf = malloc((count + GUARD) * sizeof(float));
    ck_assert_ptr_nonnull(buf);
    for (size_t g = 0; g < GUARD; g++)
        buf[count + g] = SENTINEL;
    return buf;
}

int guard_intact(const float *buf, size_t count)
{
    for (size_t g = 0; g < GUARD; g++)
        if (buf[count + g] != SENTINEL)
            return 0;
    return 1;
}

float *exact_input(size_t count)
{
    float *buf = guarded(count);
    for (size_t i = 0; i < count; i++)
        buf[i] = exact_value(world_rank, i);
    return buf;
}

float *random_input(size_t count)
{
    float *buf = guarded(count);
    dp_rng rng;
    dp_rng_seed(&rng, dp_rng_mix(2024, (uint64_t)world_rank));
    for (size_t i = 0; i < count; i++)
        buf[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    return buf;
}

float *copy_of(const float *buf, size_t count)
{
    float *copy = guarded(count);
    memcpy(copy, buf, count * sizeof(float));
    return copy;
}

float *mpi_sum(const float *input, size_t count, int absolute)
{
    float *sum = copy_of(input, count);
    for (size_t i = 0; absolute && i < count; i++)
        sum[i] = fabsf(sum[i]);
    MPI_Allreduce(MPI_IN_PLACE, sum, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return sum;
}

int close_to(const float *got, const float *expected, const float *abs_sum, dp_range r)
{
    for (size_t i = r.begin; i < r.end; i++)
        if (!(fabsf(got[i] - expected[i]) <= (float)world_size * FLT_EPSILON * abs_sum[i]))
            return 0; /* written so that NaN fails too */
    return 1;
}

dp_range whole(size_t count)
{
    dp_range r = {0, count};
    return r;
}

void open_comm(dp_comm *c, const char *algorithm)
{
    ck_assert_msg(dp_comm_init(c, MPI_COMM_WORLD, algorithm) == 0, "%s", dp_last_error());
}

void for_every_named_algorithm(void (*check)(dp_comm *c, const char *label))
{
    char names[1024];
    strcpy(names, dp_comm_algorithm_names());
    char *save = NULL;
    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        dp_comm c;
        open_comm(&c, name);
        check(&c, name);
        dp_comm_free(&c);
    }
}

void for_every_host_algorithm(void (*check)(dp_comm *c, const char *label))
{
    for_every_named_algorithm(check);
    const char *inner[] = {"ring", "rhd", "mpi"};
    for (size_t i = 0; i < sizeof inner / sizeof *inner; i++) {
        dp_comm c;
        open_comm(&c, "hier");
        c.node = world_rank / 2;
        ck_assert(dp_comm_set_hier_inner(&c, inner[i]) == 0);
        char label[64];
        snprintf(label, sizeof label, "hier over nodes of 2, inner %s", inner[i]);
        check(&c, label);
        dp_comm_free(&c);
    }
}

uint64_t allreduce_bytes(const char *algorithm, dp_dtype dtype, void *buf, size_t count)
{
    dp_comm c;
    open_comm(&c, algorithm);
    dp_request_args a = {.kind = DP_ALLREDUCE, .buf = buf, .count = count, .dtype = dtype};
    dp_request *q = NULL;
    ck_assert(all_ok(dp_comm_start(&c, &a, &q) == 0 && dp_request_wait(&q) == 0));
    uint64_t sent = c.traffic.bytes[DP_ALLREDUCE];
    dp_comm_free(&c);
    return sent;
}
