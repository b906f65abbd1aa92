/* Inside the CUDA backend: the context its operations (cuda.c, the GEMMs in cuda_gemm.c) and
 * its lifetime (cuda_context.c) share, and the checks every CUDA and cuBLAS call goes through. */
#ifndef DP_BACKEND_CUDA_CONTEXT_H
#define DP_BACKEND_CUDA_CONTEXT_H

#include "src/backend/cublas_api.h"
#include "src/backend/cuda_kernels.h"
#include "src/backend/cuda_lt.h"
#include "src/backend/cuda_operands.h"
#include "src/backend/device.h"

#include <cuda_runtime_api.h>

typedef struct cuda_context {
    dp_backend be;                  /* the operations; be.state points back here */
    int rank, device, gpus;
    int check_launches;             /* CUDA_LAUNCH_BLOCKING=1: synchronise after every kernel */
    dp_cublas_api blas_api;         /* cuBLAS, opened with the backend (cublas_api.h) */
    cublasHandle_t blas;
    cublasComputeType_t compute;    /* --precision: FP32 exact, TF32 inputs, or FP32 for bf16 operands */
    cudaDataType operands;          /* A's and B's elements: CUDA_R_32F, or CUDA_R_16BF copies (bf16) */
    dp_cuda_bf16_operands bf16;     /* where the bf16 copies are made */
    dp_cuda_lt *lt;                 /* the fused GEMMs (cuda_lt.c) */
    cudaStream_t stream;            /* where every operation queues */
    dp_cuda_partial *partials;      /* DP_MAX_PARTIALS reduction results, device */
    dp_cuda_partial *host_partials; /* where they are read back, page-locked */
    cudaEvent_t timer[DP_TIMER_SLOTS]; /* --trace's timestamps, created when first needed */
    int timer_used;
    int capturing;                  /* the stream records a graph: timer marks become its own records */
    int capture_timer;              /* the first timer slot of the capture's marks */
    char description[1024];
} cuda_context;

static inline cuda_context *ctx_of(const dp_backend *be)
{
    return be->state;
}

/* 0, or the error of a failed call recorded with the call, file, line, rank and CUDA's message;
 * CUDA's last error is cleared so that the next launch check is not blamed for this one. */
int dp_cuda_status(const cuda_context *c, cudaError_t e, const char *call, const char *file, int line);
/* A kernel launch's status; with CUDA_LAUNCH_BLOCKING=1 also its completion, so a fault is
 * named after the kernel that raised it. */
int dp_cuda_launch_status(const cuda_context *c, cudaError_t e, const char *call, const char *file, int line);
int dp_cuda_blas_status(const cuda_context *c, cublasStatus_t s, const char *call, const char *file, int line);

/* c is the context whose rank and GPU the message names. */
#define CUDA_CALL(c, call) dp_cuda_status((c), (call), #call, __FILE__, __LINE__)
/* call goes through the loaded table; name is cuBLAS's, for the message. */
#define BLAS_CALL(c, name, call) dp_cuda_blas_status((c), (call), name, __FILE__, __LINE__)
/* A launcher of cuda_kernels.h on c's stream. */
#define LAUNCH(c, launcher, ...) dp_cuda_launch_status((c), launcher((c)->stream, __VA_ARGS__), #launcher, __FILE__, __LINE__)

/* The operations (cuda.c), copied into each context at open. */
extern const dp_backend dp_cuda_operations;

#endif
