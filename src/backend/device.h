/* Between the run-time backend choice (select.c) and the CUDA backend (cuda.c). */
#ifndef DP_BACKEND_DEVICE_H
#define DP_BACKEND_DEVICE_H

#include "dp/backend.h"

/* Calls the handler set with dp_backend_set_fatal_handler, else reports and MPI_Aborts. */
_Noreturn void dp_backend_fatal(void);

int dp_cuda_gpu_count(void);
int dp_cuda_gpu_ids(dp_gpu_id *ids, int max);
int dp_cuda_open(const dp_backend_request *request, const dp_backend **out);
void dp_cuda_close(void);

#endif
