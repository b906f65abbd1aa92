/* A statically linked NVTX injection (nvtx3's InitializeInjectionNvtx2_fnptr), in the fake CUDA
 * runtime's dp_worker only: with DP_NVTX_RECORD=PATH each process writes the NVTX calls the
 * library makes to PATH.PID, one line each ("push forward module 0", "pop", "start 7 all-reduce
 * bucket 0", "end 7"), so tests/fakecuda-nvtx.sh sees the ranges Nsight Systems would show,
 * without Nsight. Without the variable, the library's NVTX calls stay no-ops. */
#include "config.h"

#if defined(HAVE_NVTX)
#include <stdint.h>
/* Declared before nvtx3's own code uses it (NVTX_API is empty on Linux); defined below, strong,
 * so the library's weak declaration resolves here. */
extern int (*InitializeInjectionNvtx2_fnptr)(const void *(*)(uint32_t));
#define NVTX_STATIC_INJECTION_IMPL
#include <nvtx3/nvToolsExt.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static FILE *record;
static nvtxRangeId_t ranges;

static int NVTX_API push(const char *message)
{
    fprintf(record, "push %s\n", message);
    return 0;
}

static int NVTX_API pop(void)
{
    fputs("pop\n", record);
    return 0;
}

/* Collectives end on whichever thread completes them (the progress thread too). */
static nvtxRangeId_t NVTX_API start(const char *message)
{
    nvtxRangeId_t id = __atomic_add_fetch(&ranges, 1, __ATOMIC_RELAXED);
    fprintf(record, "start %llu %s\n", (unsigned long long)id, message);
    return id;
}

static void NVTX_API end(nvtxRangeId_t id)
{
    fprintf(record, "end %llu\n", (unsigned long long)id);
}

static int NVTX_API initialize(NvtxGetExportTableFunc_t get_export_table)
{
    const char *path = getenv("DP_NVTX_RECORD");
    if (!path)
        return 0; /* no recording: NVTX stays a no-op */
    char name[4096];
    snprintf(name, sizeof name, "%s.%d", path, (int)getpid());
    record = fopen(name, "w");
    const NvtxExportTableCallbacks *callbacks = get_export_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table;
    unsigned int size;
    if (!record || !callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
        size <= NVTX_CBID_CORE_RangePop)
        return 0;
    setvbuf(record, NULL, _IOLBF, 0);
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
    *table[NVTX_CBID_CORE_RangeStartA] = (NvtxFunctionPointer)start;
    *table[NVTX_CBID_CORE_RangeEnd] = (NvtxFunctionPointer)end;
    return 1;
}

NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = initialize;
#endif
