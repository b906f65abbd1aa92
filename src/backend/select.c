/* Choosing the backend at run time, and what a device backend does when a call fails. */
#include "config.h"

#include "dp/backend.h"
#include "dp/error.h"
#include "src/backend/device.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static dp_backend_fatal_fn fatal_handler;

void dp_backend_set_fatal_handler(dp_backend_fatal_fn handler)
{
    fatal_handler = handler;
}

_Noreturn void dp_backend_fatal(void)
{
    if (fatal_handler)
        fatal_handler();
    fprintf(stderr, "dptrain: fatal: %s\n", dp_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}

int dp_backend_gpu_count(void)
{
#ifdef HAVE_CUDA
    return dp_cuda_gpu_count();
#else
    return 0;
#endif
}

int dp_backend_gpu_ids(dp_gpu_id *ids, int max)
{
#ifdef HAVE_CUDA
    return dp_cuda_gpu_ids(ids, max);
#else
    (void)ids;
    (void)max;
    return 0;
#endif
}

int dp_backend_cuda_usable(const dp_backend_request *request)
{
    int gpus = dp_backend_gpu_count();
    int own = request->binding ? request->binding->own_gpu : request->local_size <= gpus;
    return gpus > 0 && (request->share_gpu || own);
}

int dp_backend_open(const dp_backend_request *request, const dp_backend **out)
{
    dp_device device = request->device;
    if (device == DP_DEVICE_AUTO)
        device = dp_backend_cuda_usable(request) ? DP_DEVICE_CUDA : DP_DEVICE_CPU;
    if (device == DP_DEVICE_CPU) {
        *out = dp_backend_cpu();
        return 0;
    }
#ifdef HAVE_CUDA
    return dp_cuda_open(request, out);
#else
    return dp_fail(DP_EDEVICE, "--device cuda: this dp_worker was built without the CUDA backend "
                   "(configure found no nvcc and cuBLAS, or was given --without-cuda; its summary says which)");
#endif
}

void dp_backend_close(const dp_backend *be)
{
#ifdef HAVE_CUDA
    if (be && !be->host_memory)
        dp_cuda_close();
#else
    (void)be;
#endif
}
