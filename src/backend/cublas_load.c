/* cuBLAS opened when the CUDA backend opens (see cublas_api.h): the library this build was
 * compiled against, by its soname, found as the program finds its other CUDA libraries (the
 * run-time path configure set, or LD_LIBRARY_PATH). */
#include "src/backend/cublas_api.h"

#include <dlfcn.h>
#include <stdio.h>

#define TEXT(x) #x
#define SONAME(major) "libcublas.so." TEXT(major)

int dp_cublas_load(dp_cublas_api *api, char *why, size_t size)
{
    static const char *const soname = SONAME(CUBLAS_VER_MAJOR);
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, size, "cannot open %s: %s", soname, dlerror());
        return -1;
    }
    /* The library stays open for the process: its handles may outlive any one backend. */
    *(void **)&api->create = dlsym(lib, "cublasCreate_v2");
    *(void **)&api->destroy = dlsym(lib, "cublasDestroy_v2");
    *(void **)&api->set_stream = dlsym(lib, "cublasSetStream_v2");
    *(void **)&api->gemm_ex = dlsym(lib, "cublasGemmEx");
    *(void **)&api->status_string = dlsym(lib, "cublasGetStatusString");
    if (api->create && api->destroy && api->set_stream && api->gemm_ex && api->status_string)
        return 0;
    snprintf(why, size, "%s lacks a cuBLAS function this build calls (cublasCreate_v2, cublasDestroy_v2, "
             "cublasSetStream_v2, cublasGemmEx, cublasGetStatusString)", soname);
    return -1;
}
