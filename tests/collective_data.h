/* Shared by the multi-rank collective suites (test_collectives, test_requests): inputs that
 * differ by rank and index, MPI's own sums as the reference, and checks that every rank
 * agrees on (so all ranks fail together and none waits in a collective). */
#ifndef DP_TEST_COLLECTIVE_DATA_H
#define DP_TEST_COLLECTIVE_DATA_H

#include "dp/comm.h"
#include "dp/partition.h"

#include <stddef.h>
#include <stdint.h>

enum { COUNT_CASES = 7 };

extern int world_rank, world_size;

/* 0, 1, W-1, W, W+1, 1000003, 2^20: the counts that break block arithmetic, and two large. */
void counts_for_world(size_t counts[COUNT_CASES]);

/* 1 on every rank when ok on every rank. */
int all_ok(int ok);

/* Small integers differing by rank and index: every sum of W <= 8 of them is exact in float32. */
float exact_value(int rank, size_t i);

/* What the owner of block `owner` puts at index i (all-gather inputs): says where it came from. */
float owned_value(int owner, size_t i);

/* count floats followed by sentinels that nothing may change (guard_intact checks them). */
float *guarded(size_t count);
int guard_intact(const float *buf, size_t count);

/* Guarded buffers: exact_value of this rank; uniform in [-1, 1) from a per-rank seed (sums
 * round, so the order of additions shows); a copy. */
float *exact_input(size_t count);
float *random_input(size_t count);
float *copy_of(const float *buf, size_t count);

/* The reference: MPI_Allreduce of input (of |input| when absolute, for error bounds). */
float *mpi_sum(const float *input, size_t count, int absolute);

/* Within the rounding any order of W additions allows (W eps sum|x|), over r. */
int close_to(const float *got, const float *expected, const float *abs_sum, dp_range r);

dp_range whole(size_t count);

void open_comm(dp_comm *c, const char *algorithm);

/* check(c, name) on a dp_comm of every host algorithm (dp_comm_algorithm_names) in turn. */
void for_every_named_algorithm(void (*check)(dp_comm *c, const char *label));
/* The same, then of hier across simulated nodes of two ranks with each inner algorithm (ring,
 * rhd, mpi): the leaders' all-reduce runs too. */
void for_every_host_algorithm(void (*check)(dp_comm *c, const char *label));

/* The bytes a fresh dp_comm running algorithm counts for one all-reduce of count elements of
 * dtype in buf (summed in place). */
uint64_t allreduce_bytes(const char *algorithm, dp_dtype dtype, void *buf, size_t count);

#endif
