/* cuBLASLt opened when the CUDA backend opens (see cublaslt_api.h): the library this build was
 * compiled against, by its soname, found as cuBLAS is (cublas_load.c). */
#include "src/backend/cublaslt_api.h"

#include <dlfcn.h>
#include <stdio.h>

#define TEXT(x) #x
#define SONAME(major) "libcublasLt.so." TEXT(major)

/* Each entry: where the table keeps the function, and the library's name for it. */
#define ENTRY(field, symbol) {(void **)&api->field, symbol}

int dp_cublaslt_load(dp_cublaslt_api *api, char *why, size_t size)
{
    static const char *const soname = SONAME(CUBLAS_VER_MAJOR);
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, size, "cannot open %s: %s", soname, dlerror());
        return -1;
    }
    /* The library stays open for the process, as cuBLAS does. */
    const struct {
        void **slot;
        const char *symbol;
    } entries[] = {
        ENTRY(create, "cublasLtCreate"), ENTRY(destroy, "cublasLtDestroy"),
        ENTRY(desc_create, "cublasLtMatmulDescCreate"), ENTRY(desc_destroy, "cublasLtMatmulDescDestroy"),
        ENTRY(desc_set, "cublasLtMatmulDescSetAttribute"), ENTRY(layout_create, "cublasLtMatrixLayoutCreate"),
        ENTRY(layout_destroy, "cublasLtMatrixLayoutDestroy"), ENTRY(pref_create, "cublasLtMatmulPreferenceCreate"),
        ENTRY(pref_destroy, "cublasLtMatmulPreferenceDestroy"),
        ENTRY(pref_set, "cublasLtMatmulPreferenceSetAttribute"),
        ENTRY(heuristic, "cublasLtMatmulAlgoGetHeuristic"), ENTRY(matmul, "cublasLtMatmul"),
        ENTRY(status_string, "cublasLtGetStatusString"),
    };
    for (size_t i = 0; i < sizeof entries / sizeof *entries; i++)
        if (!(*entries[i].slot = dlsym(lib, entries[i].symbol))) {
            snprintf(why, size, "%s lacks %s, which this build calls", soname, entries[i].symbol);
            return -1;
        }
    return 0;
}
