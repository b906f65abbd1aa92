/* A device backend as the run-time choice (select.c) sees it: the CUDA backend, when built,
 * provides this entry (cuda.c), so select.c reaches it and it never calls back. */
#ifndef DP_BACKEND_DEVICE_H
#define DP_BACKEND_DEVICE_H

#include "dp/backend.h"

typedef struct dp_device_backend {
    int (*gpu_count)(void);
    int (*gpu_ids)(dp_gpu_id *ids, int max);
    int (*open)(const dp_backend_request *request, const dp_backend **out);
    void (*close)(const dp_backend *be);
} dp_device_backend;

#ifdef HAVE_CUDA
extern const dp_device_backend dp_cuda_device;
#endif

#endif
