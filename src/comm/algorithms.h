/* The collective algorithms behind dp_comm's requests. Adding one: write its phases (a
 * schedule, see request.h) in src/comm/NAME.c and add a row to the registry (registry.c).
 * Every algorithm provides all three collectives. */
#ifndef DP_COMM_ALGORITHMS_H
#define DP_COMM_ALGORITHMS_H

#include "src/comm/request.h"

#include <stddef.h>

/* Longest algorithm name, so the list of names fits a fixed buffer. */
#define DP_ALGORITHM_NAME_MAX 31

/* Which memory an algorithm can sum. */
enum dp_buffer_place {
    DP_BUFFER_HOST,   /* it adds on the CPU: GPU gradients are staged through host memory */
    DP_BUFFER_MPI,    /* only MPI touches the data: GPU memory when MPI is CUDA-aware */
    DP_BUFFER_DEVICE  /* GPU memory only (NCCL) */
};

struct dp_algorithm {
    const char *name;             /* at most DP_ALGORITHM_NAME_MAX characters */
    const char *summary;
    enum dp_buffer_place place;
    const dp_driver *driver;
    const dp_phase_fn *phases[DP_COLLECTIVE_KINDS]; /* the schedule driver's, per kind */
    /* Plans a request before its first round (fold, segments); NULL: nothing to plan. */
    void (*plan)(dp_request *q);
    /* Scratch floats a request of this kind needs, with blocks of at most largest_block (elements
     * of a float's size or less; a request of wider ones gets as many times this). */
    size_t (*scratch_floats)(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block);
    /* Reserves what the algorithm runs on besides c's slots (hier: its groups' slots), after
     * dp_comm_reserve reserved c's; NULL: nothing. */
    int (*reserve)(dp_comm *c, size_t max_count, int requests, size_t parent_count);
    /* auto only: the algorithm that runs a message of `bytes`. */
    int (*pick)(dp_comm *c, size_t bytes, const struct dp_algorithm **picked);
    /* Frees what the algorithm keeps on c (nccl: communicator, stream, the slots' events;
     * auto: its table), before c's slots go; NULL: nothing. */
    void (*close)(dp_comm *c);
};

/* The algorithms, defined in their files. */
extern const struct dp_algorithm dp_algorithm_mpi, dp_algorithm_naive, dp_algorithm_ring,
    dp_algorithm_ring_pipelined, dp_algorithm_rhd, dp_algorithm_rd, dp_algorithm_hier, dp_algorithm_auto;
#ifdef HAVE_NCCL
extern const struct dp_algorithm dp_algorithm_nccl;
#endif

/* Scratch helpers shared by algorithms: none, the whole buffer (reductions only), one block. */
size_t dp_scratch_none(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block);
size_t dp_scratch_whole(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block);

/* fold.c: the standard fold that lets a power-of-two schedule run on any W. */
dp_fold_plan dp_fold_plan_for(const dp_comm *c);
int dp_fold_real_rank(const dp_fold_plan *p, int v);
void dp_plan_fold(dp_request *q);
/* Phases: the extra ranks hand their whole buffer to their partner, which adds it (in), and
 * get the result back (out); for reduce-scatter and all-gather only the extra rank's block
 * goes back (hand_back) or over (hand_over). */
int dp_fold_in(dp_request *q, int round, dp_round *out);
int dp_fold_out(dp_request *q, int round, dp_round *out);
int dp_fold_hand_back(dp_request *q, int round, dp_round *out);
int dp_fold_hand_over(dp_request *q, int round, dp_round *out);

/* rhd.c: the recursive-doubling all-gather over the group, which rd shares. */
extern const dp_phase_fn dp_doubling_allgather_phases[];

#endif
