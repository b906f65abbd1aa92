/* cuBLAS opened when the CUDA backend opens (see cublas_api.h and library_load.h). */
#include "src/backend/cublas_api.h"
#include "src/backend/library_load.h"

int dp_cublas_load(dp_cublas_api *api, char *why, size_t size)
{
    const dp_symbol symbols[] = {
        {(void **)&api->create, "cublasCreate_v2"},      {(void **)&api->destroy, "cublasDestroy_v2"},
        {(void **)&api->set_stream, "cublasSetStream_v2"}, {(void **)&api->gemm_ex, "cublasGemmEx"},
        {(void **)&api->status_string, "cublasGetStatusString"},
    };
    return dp_library_load(DP_SONAME("libcublas.so.", CUBLAS_VER_MAJOR), symbols, sizeof symbols / sizeof *symbols,
                           why, size);
}
