/* cuBLASLt opened when the CUDA backend opens (see cublaslt_api.h and library_load.h). */
#include "src/backend/cublaslt_api.h"
#include "src/backend/library_load.h"

/* Each entry: where the table keeps the function, and the library's name for it. */
#define ENTRY(field, name) {(void **)&api->field, name}

int dp_cublaslt_load(dp_cublaslt_api *api, char *why, size_t size)
{
    const dp_symbol symbols[] = {
        ENTRY(create, "cublasLtCreate"), ENTRY(destroy, "cublasLtDestroy"),
        ENTRY(desc_create, "cublasLtMatmulDescCreate"), ENTRY(desc_destroy, "cublasLtMatmulDescDestroy"),
        ENTRY(desc_set, "cublasLtMatmulDescSetAttribute"), ENTRY(layout_create, "cublasLtMatrixLayoutCreate"),
        ENTRY(layout_destroy, "cublasLtMatrixLayoutDestroy"), ENTRY(pref_create, "cublasLtMatmulPreferenceCreate"),
        ENTRY(pref_destroy, "cublasLtMatmulPreferenceDestroy"),
        ENTRY(pref_set, "cublasLtMatmulPreferenceSetAttribute"),
        ENTRY(heuristic, "cublasLtMatmulAlgoGetHeuristic"), ENTRY(matmul, "cublasLtMatmul"),
        ENTRY(status_string, "cublasLtGetStatusString"),
    };
    return dp_library_load(DP_SONAME("libcublasLt.so.", CUBLAS_VER_MAJOR), symbols, sizeof symbols / sizeof *symbols,
                           why, size);
}
