/* OpenBLAS's kernel choice, corrected. A DYNAMIC_ARCH OpenBLAS picks its kernels when it loads,
 * from the CPU models it knows; on a newer CPU it falls back to a generic core (0.3.21 runs
 * its SSE3 Prescott kernels on an Emerald Rapids Xeon, 5x slower than SkylakeX there). It
 * reads OPENBLAS_CORETYPE at that moment only, so the fix is to run the program again with
 * the variable set, before MPI_Init so the launcher still sees one process per rank. */
#include "config.h"

#include "dp/blas.h"
#include "src/backend/blas_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Holds the core OpenBLAS chose itself in the run dptrain started again: never twice. */
#define CORE_WAS "DPTRAIN_OPENBLAS_CORE_WAS"

static char exec_failure[160];

#if defined(DP_BLAS_OPENBLAS) && defined(__x86_64__)
#include <cblas.h>

/* x86-64 cores without AVX2 kernels, which OpenBLAS also falls back to on CPUs it does not know. */
static const char *const generic_cores[] = {
    "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge",
    "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat", "Bulldozer", "Piledriver", "Steamroller", "Excavator",
};

static int runs_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd");
}

static int runs_avx512_bf16(void)
{
    return runs_avx512() && __builtin_cpu_supports("avx512bf16");
}

static int runs_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int runs_avx2_amd(void)
{
    return runs_avx2() && __builtin_cpu_is("amd");
}

/* Best first: the core OpenBLAS itself picks on such a CPU when it knows the model. */
static const struct {
    const char *core, *features;
    int (*cpu_runs)(void);
} best_cores[] = {
    {"Cooperlake", "AVX-512 BF16", runs_avx512_bf16},
    {"SkylakeX", "AVX-512", runs_avx512},
    {"Zen", "AVX2", runs_avx2_amd},
    {"Haswell", "AVX2", runs_avx2},
};

static int is_generic(const char *core)
{
    for (size_t i = 0; i < sizeof generic_cores / sizeof *generic_cores; i++)
        if (strcmp(core, generic_cores[i]) == 0)
            return 1;
    return 0;
}

void dp_blas_choose_core(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE") || getenv(CORE_WAS))
        return;
    const char *config = openblas_get_config(), *chosen = openblas_get_corename();
    if (!config || !strstr(config, "DYNAMIC_ARCH") || !chosen || !is_generic(chosen))
        return;
    __builtin_cpu_init();
    size_t i = 0, n = sizeof best_cores / sizeof *best_cores;
    while (i < n && !best_cores[i].cpu_runs())
        i++;
    if (i == n)
        return;
    if (setenv(CORE_WAS, chosen, 1) || setenv("OPENBLAS_CORETYPE", best_cores[i].core, 1))
        return;
    execv("/proc/self/exe", argv);
    snprintf(exec_failure, sizeof exec_failure, " (OpenBLAS chose the generic %s on a CPU with %s; running again "
             "with OPENBLAS_CORETYPE=%s failed: %s)", chosen, best_cores[i].features, best_cores[i].core,
             strerror(errno));
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(CORE_WAS);
}

/* The features that made dp_blas_choose_core pick core. */
static const char *features_of(const char *core)
{
    for (size_t i = 0; i < sizeof best_cores / sizeof *best_cores; i++)
        if (strcmp(core, best_cores[i].core) == 0)
            return best_cores[i].features;
    return "?";
}
#else
void dp_blas_choose_core(char **argv)
{
    (void)argv;
}

static const char *features_of(const char *core)
{
    (void)core;
    return "?";
}
#endif

void dp_blas_core_note(char *text, size_t size)
{
    const char *was = getenv(CORE_WAS), *set = getenv("OPENBLAS_CORETYPE");
    if (exec_failure[0])
        snprintf(text, size, "%s", exec_failure);
    else if (was && set)
        snprintf(text, size, " (set by dptrain: OpenBLAS chose the generic %s on a CPU with %s; "
                 "OPENBLAS_CORETYPE overrides)", was, features_of(set));
    else if (set)
        snprintf(text, size, " (OPENBLAS_CORETYPE=%s)", set);
    else if (size)
        text[0] = '\0';
}
