/* The CUDA backend's lifetime: the GPU a rank binds to (the node's binding plan, or local rank
 * modulo the GPUs), the context's stream, cuBLAS and cuBLASLt handles, the reductions' scratch
 * and the banner's description, released in reverse; and the errors every CUDA and cuBLAS call
 * is checked into. The operations themselves are cuda.c's. */
#include "config.h"

#include "src/backend/cuda_context.h"

#include "dp/error.h"
#include "src/backend/fatal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *visible_devices(void)
{
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    return list ? list : "(unset)";
}

/* Errors a kernel raises while it runs: sticky, and reported by whichever call comes next. */
static int kernel_fault(cudaError_t e)
{
    static const cudaError_t faults[] = {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorMisalignedAddress,
                                         cudaErrorIllegalInstruction, cudaErrorInvalidAddressSpace, cudaErrorInvalidPc,
                                         cudaErrorHardwareStackError, cudaErrorAssert, cudaErrorLaunchTimeout};
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++)
        if (e == faults[i])
            return 1;
    return 0;
}

int dp_cuda_status(const cuda_context *c, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    const char *hint = kernel_fault(e) && !c->check_launches
                           ? " (a kernel's fault, reported by the next call: it may come from any earlier kernel; "
                             "rerun with CUDA_LAUNCH_BLOCKING=1 to stop at the kernel that faulted)"
                           : "";
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d (GPU %d): %s: %s%s", call, file, line,
                   c->rank, c->device, cudaGetErrorName(e), cudaGetErrorString(e), hint);
}

int dp_cuda_launch_status(const cuda_context *c, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess && c->check_launches)
        e = cudaStreamSynchronize(c->stream);
    return dp_cuda_status(c, e, call, file, line);
}

int dp_cuda_blas_status(const cuda_context *c, cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return dp_fail(DP_EDEVICE, "%s failed at %s:%d on rank %d (GPU %d): %s", call, file, line,
                   c->rank, c->device, c->blas_api.status_string(s));
}

static int cuda_gpu_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess)
        return count;
    (void)cudaGetLastError();
    return 0;
}

static int cuda_gpu_ids(dp_gpu_id *ids, int max)
{
    int count = cuda_gpu_count(), found = 0;
    struct cudaDeviceProp prop;
    for (; found < count && found < max; found++) {
        if (cudaGetDeviceProperties(&prop, found) != cudaSuccess) {
            (void)cudaGetLastError();
            break;
        }
        memcpy(ids[found].uuid, prop.uuid.bytes, sizeof ids[found].uuid);
    }
    return found;
}

static int bind_device(cuda_context *c, const dp_backend_request *request)
{
    cudaError_t e = cudaGetDeviceCount(&c->gpus);
    if (e != cudaSuccess || c->gpus == 0) {
        (void)cudaGetLastError();
        return dp_fail(DP_EDEVICE, "--device cuda: rank %d sees no CUDA GPU (cudaGetDeviceCount: %s; CUDA_VISIBLE_DEVICES=%s)",
                       request->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible_devices());
    }
    const dp_gpu_binding *plan = request->binding;
    if (plan && !plan->own_gpu && !request->share_gpu)
        return dp_fail(DP_EINVAL, "--device cuda: %s (rank %d sees %d GPU%s; CUDA_VISIBLE_DEVICES=%s): start one rank per GPU, "
                       "or add --share-gpu to let ranks take turns on a GPU",
                       plan->text, request->rank, c->gpus, c->gpus == 1 ? "" : "s", visible_devices());
    if (!plan && request->local_size > c->gpus && !request->share_gpu)
        return dp_fail(DP_EINVAL, "--device cuda: %d ranks on rank %d's node but %d GPU%s visible (CUDA_VISIBLE_DEVICES=%s): "
                       "start one rank per GPU, or add --share-gpu to let ranks take turns on a GPU",
                       request->local_size, request->rank, c->gpus, c->gpus == 1 ? "" : "s", visible_devices());
    c->device = plan ? plan->gpu : request->local_rank % c->gpus;
    TRY(CUDA_CALL(c, cudaSetDevice(c->device)));
    return 0;
}

/* --precision's cuBLAS compute type, the GEMMs' operand type and the banner's words. bf16 needs
 * bf16 operands in memory: FP32 operands at CUBLAS_COMPUTE_32F_FAST_16BF ran at TF32's speed on
 * an H200. A/B CUDA_R_16BF, C CUDA_R_32F at CUBLAS_COMPUTE_32F is a combination cublasGemmEx and
 * cublasLtMatmul list; the same inputs, rounded alike, with FP32 accumulation as FAST_16BF. */
static const struct {
    cublasComputeType_t compute;
    cudaDataType operands;
    const char *words;
} precisions[] = {
    [DP_PRECISION_FP32] = {CUBLAS_COMPUTE_32F, CUDA_R_32F, "exact FP32"},
    [DP_PRECISION_TF32] = {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, "TF32 tensor-core"},
    [DP_PRECISION_BF16] = {CUBLAS_COMPUTE_32F, CUDA_R_16BF,
                           "bf16 tensor-core (bf16 operands, FP32 accumulation and outputs; "
                           "bf16 activations with cuBLASLt)"},
};

/* bf16 and TF32 tensor cores came with Ampere (compute capability 8.0): on an older GPU the
 * GEMMs of --precision bf16 or tf32 run in FP32, and the description says why. */
static dp_precision usable_precision(dp_precision asked, const struct cudaDeviceProp *prop, char *note, size_t size)
{
    static const char *const asked_names[] = {[DP_PRECISION_TF32] = "tf32", [DP_PRECISION_BF16] = "bf16"};
    note[0] = '\0';
    if (asked == DP_PRECISION_FP32 || prop->major >= 8)
        return asked;
    snprintf(note, size, " (--precision %s: sm_%d%d has no %s tensor cores, which came with sm_80)", asked_names[asked],
             prop->major, prop->minor, asked == DP_PRECISION_BF16 ? "bf16" : "TF32");
    return DP_PRECISION_FP32;
}

static void describe_device(cuda_context *c, const dp_backend_request *request, const struct cudaDeviceProp *prop,
                            dp_precision precision, const char *note)
{
    char fused[256];
    dp_cuda_lt_describe(c->lt, fused, sizeof fused);
    const unsigned char *u = (const unsigned char *)prop->uuid.bytes;
    snprintf(c->description, sizeof c->description,
             "cuda: GPU %d of %d visible (GPU-%02x%02x%02x%02x, PCI %04x:%02x:%02x.0), %.96s (sm_%d%d, %zu GiB), %s GEMMs%s, %s%s%s",
             c->device, c->gpus, u[0], u[1], u[2], u[3], (unsigned)prop->pciDomainID, (unsigned)prop->pciBusID,
             (unsigned)prop->pciDeviceID, prop->name, prop->major, prop->minor, (size_t)(prop->totalGlobalMem >> 30),
             precisions[precision].words, note, fused, request->binding ? "; " : "",
             request->binding ? request->binding->text : "");
}

static int create_resources(cuda_context *c, const dp_backend_request *request)
{
    char why[512];
    if (dp_cublas_load(&c->blas_api, why, sizeof why))
        return dp_fail(DP_EINVAL, "rank %d: --device cuda: cuBLAS: %s", request->rank, why);
    TRY(CUDA_CALL(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)));
    TRY(BLAS_CALL(c, "cublasCreate", c->blas_api.create(&c->blas)));
    TRY(BLAS_CALL(c, "cublasSetStream", c->blas_api.set_stream(c->blas, c->stream)));
    TRY(CUDA_CALL(c, cudaMalloc((void **)&c->partials, DP_MAX_PARTIALS * sizeof *c->partials)));
    TRY(CUDA_CALL(c, cudaMallocHost((void **)&c->host_partials, DP_MAX_PARTIALS * sizeof *c->host_partials)));
    struct cudaDeviceProp prop;
    TRY(CUDA_CALL(c, cudaGetDeviceProperties(&prop, c->device)));
    char note[128];
    dp_precision precision = usable_precision(request->precision, &prop, note, sizeof note);
    c->compute = precisions[precision].compute;
    c->operands = precisions[precision].operands;
    c->bf16 = (dp_cuda_bf16_operands){.be = &c->be, .rank = request->rank};
    dp_cuda_lt_setup lt = {.be = &c->be, .stream = c->stream, .compute = c->compute, .operands = c->operands,
                           .unfused = request->unfused, .rank = request->rank, .device = c->device};
    TRY(dp_cuda_lt_open(&lt, &c->lt));
    describe_device(c, request, &prop, precision, note);
    return 0;
}

/* Releases what create_resources made and the context. With `report`, the first failure is
 * recorded and returned; without (after a failed open), failures are ignored so that the error
 * that made the open fail is the one the caller reports. */
static int release_context(cuda_context *c, int report)
{
    int status = dp_cuda_lt_close(c->lt, report);
    int freed_copies = dp_cuda_bf16_operands_release(&c->bf16, report);
    if (!status)
        status = freed_copies;
    if (c->blas) {
        cublasStatus_t s = c->blas_api.destroy(c->blas);
        if (report && !status)
            status = dp_cuda_blas_status(c, s, "cublasDestroy", __FILE__, __LINE__);
    }
    cudaError_t freed[2] = {c->partials ? cudaFree(c->partials) : cudaSuccess,
                            c->host_partials ? cudaFreeHost(c->host_partials) : cudaSuccess};
    if (report && !status)
        status = dp_cuda_status(c, freed[0], "cudaFree(partials)", __FILE__, __LINE__);
    if (report && !status)
        status = dp_cuda_status(c, freed[1], "cudaFreeHost(host_partials)", __FILE__, __LINE__);
    for (int i = 0; i < DP_TIMER_SLOTS && c->timer[i]; i++) {
        cudaError_t e = cudaEventDestroy(c->timer[i]);
        if (report && !status)
            status = dp_cuda_status(c, e, "cudaEventDestroy(timer)", __FILE__, __LINE__);
    }
    if (c->stream) {
        cudaError_t e = cudaStreamDestroy(c->stream);
        if (report && !status)
            status = dp_cuda_status(c, e, "cudaStreamDestroy", __FILE__, __LINE__);
    }
    (void)cudaGetLastError();
    free(c);
    return status;
}

static int cuda_open(const dp_backend_request *request, const dp_backend **out)
{
    if (request->precision > DP_PRECISION_BF16)
        return dp_fail(DP_EINVAL, "rank %d: --device cuda: GEMMs take --precision fp32, tf32 or bf16", request->rank);
    cuda_context *c = calloc(1, sizeof *c);
    if (!c)
        return dp_fail(DP_ENOMEM, "rank %d: --device cuda: no host memory for the CUDA backend's context", request->rank);
    c->be = dp_cuda_operations;
    c->be.state = c;
    c->rank = request->rank;
    c->device = -1;
    const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    c->check_launches = blocking && strcmp(blocking, "1") == 0;
    int status = bind_device(c, request);
    if (!status)
        status = create_resources(c, request);
    if (status) {
        (void)release_context(c, 0);
        return status;
    }
    c->be.stream = c->stream;
    *out = &c->be;
    return 0;
}

static void cuda_close(const dp_backend *be)
{
    if (release_context(ctx_of(be), 1))
        dp_backend_fatal();
}

const dp_device_backend dp_cuda_device = {
    .gpu_count = cuda_gpu_count,
    .gpu_ids = cuda_gpu_ids,
    .open = cuda_open,
    .close = cuda_close,
};
