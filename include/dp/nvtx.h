/* NVTX ranges for Nsight Systems: in the CUDA build where configure found NVIDIA's header-only
 * nvtx3 (HAVE_NVTX in config.h, which the includer reads first), the step's forward and backward
 * per module, each collective from its start to its completion and the update show as named
 * ranges on the timeline (nsys profile -t cuda,nvtx,mpi); without a tool attached each call is a
 * test of one pointer. Elsewhere every function is empty: the CPU build needs no CUDA header. */
#ifndef DP_NVTX_H
#define DP_NVTX_H

#include <stdint.h>
#include <stdio.h>

#if defined(HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>

/* A nested range of this thread: "forward module 3", "update". */
static inline void dp_nvtx_push(const char *what, int index)
{
    char name[64];
    if (index >= 0)
        snprintf(name, sizeof name, "%s %d", what, index);
    nvtxRangePushA(index >= 0 ? name : what);
}

static inline void dp_nvtx_pop(void)
{
    nvtxRangePop();
}

/* A range that ends later, on any thread (a collective in flight): "all-reduce bucket 3". */
static inline uint64_t dp_nvtx_start(const char *kind, const char *label)
{
    char name[96];
    snprintf(name, sizeof name, "%s %s", kind, label);
    return nvtxRangeStartA(name);
}

static inline void dp_nvtx_end(uint64_t range)
{
    nvtxRangeEnd(range);
}
#else
static inline void dp_nvtx_push(const char *what, int index)
{
    (void)what, (void)index;
}

static inline void dp_nvtx_pop(void)
{
}

static inline uint64_t dp_nvtx_start(const char *kind, const char *label)
{
    (void)kind, (void)label;
    return 0;
}

static inline void dp_nvtx_end(uint64_t range)
{
    (void)range;
}
#endif

#endif
