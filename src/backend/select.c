/* Choosing the backend at run time: the CPU one, or the CUDA one where this build has it
 * (its entry, device.h). */
#include "config.h"

#include "dp/backend.h"
#include "dp/error.h"
#include "src/backend/device.h"

#include <stddef.h>

/* NULL: built without it. */
static const dp_device_backend *const cuda_device =
#ifdef HAVE_CUDA
    &dp_cuda_device;
#else
    NULL;
#endif

int dp_backend_gpu_count(void)
{
    return cuda_device ? cuda_device->gpu_count() : 0;
}

int dp_backend_gpu_ids(dp_gpu_id *ids, int max)
{
    return cuda_device ? cuda_device->gpu_ids(ids, max) : 0;
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
    if (!cuda_device)
        return dp_fail(DP_EDEVICE, "--device cuda: this dp_worker was built without the CUDA backend "
                       "(configure found no nvcc and cuBLAS, or was given --without-cuda; its summary says which)");
    return cuda_device->open(request, out);
}

void dp_backend_close(const dp_backend *be)
{
    if (be && !be->host_memory && cuda_device)
        cuda_device->close(be);
}

const char *const dp_epilogue_ops[DP_EPILOGUES] = {
    [DP_EPILOGUE_BIAS] = "gemm_fused/bias", [DP_EPILOGUE_RELU] = "gemm_fused/relu",
    [DP_EPILOGUE_RELU_MASK] = "gemm_fused/relu_mask", [DP_EPILOGUE_DRELU] = "gemm_fused/drelu",
    [DP_EPILOGUE_BIAS_GRAD] = "gemm_fused/bias_grad",
};
const int dp_epilogue_sums_operand[DP_EPILOGUES] = {[DP_EPILOGUE_BIAS_GRAD] = 1};

int dp_backend_require(const dp_backend *be, const char *op, dp_dtype dtype)
{
    char why[256] = "";
    if (be->supports(be, op, dtype, why, sizeof why))
        return 0;
    return dp_fail(DP_EINVAL, "the %s backend cannot run %s in %s: %s", be->name, op, dp_dtype_name(dtype), why);
}
