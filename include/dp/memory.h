/* The allocation counter: every byte of backend memory (dp_backend.alloc: host memory on the
 * CPU backend, GPU memory on CUDA) is charged to what it holds, so a run reports what it
 * really holds per kind and at its peak, and a per-rank limit (--max-memory-mb) is enforced
 * here, on any machine, before the backend is asked. The collectives' host scratch is charged
 * too (DP_MEM_COMM), as it grows with the largest message a strategy sends. Page-locked host
 * staging (alloc_host) is not backend memory and is not counted. One counter per process. */
#ifndef DP_MEMORY_H
#define DP_MEMORY_H

#include <stddef.h>

typedef enum dp_memory_kind {
    DP_MEM_PARAMETERS,  /* the model's parameters (a ZeRO-3 rank: its shard) */
    DP_MEM_GRADIENTS,   /* their gradients (ZeRO-2 and 3: the shard) */
    DP_MEM_OPTIMIZER,   /* optimizer state (ZeRO: the shard) */
    DP_MEM_WORKING,     /* a strategy's working buffers: gradient buckets, gathered parameters */
    DP_MEM_BUFFERS,     /* the model's buffers: running statistics */
    DP_MEM_ACTIVATIONS, /* module outputs, activation gradients, the batch */
    DP_MEM_DATA,        /* the training and test sets held on a device (--data-on-device), and
                           the rows of a CUDA graph's further micro-batches (--accum) */
    DP_MEM_COMM,        /* the collectives' scratch (host memory: the request pool's slots) */
    DP_MEM_OTHER,       /* counters, totals, cuBLASLt's workspace, tests */
    DP_MEM_KINDS
} dp_memory_kind;

typedef struct dp_memory_usage {
    size_t bytes[DP_MEM_KINDS]; /* held now */
    size_t peak[DP_MEM_KINDS];  /* the most each kind held at once */
    size_t total, peak_total;   /* all kinds together, now and at their peak */
    size_t limit;               /* 0: none */
} dp_memory_usage;

/* "parameters", "gradients", ... for reports. */
const char *dp_memory_kind_name(dp_memory_kind kind);

/* Backends call these around their allocations: admit refuses (DP_ENOMEM, naming what, the
 * limit and what is held) an allocation that would take the process past its limit; record
 * and release keep the books. */
int dp_memory_admit(size_t bytes, dp_memory_kind kind, const char *what);
void dp_memory_record(const void *ptr, size_t bytes, dp_memory_kind kind);
void dp_memory_release(const void *ptr);

/* The limit in MiB as the user gave it (0: none), which messages print back as given; also
 * starts a new peak from what is held now, and a new count of refusals. */
void dp_memory_set_limit_mb(double mb);
/* Allocations the limit refused since it was set. */
long dp_memory_refusals(void);
dp_memory_usage dp_memory_usage_now(void);

#endif
