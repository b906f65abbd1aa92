/* Which build of the CPU backend's loops runs: the widest instruction set this CPU and its
 * operating system support (GCC's and Clang's __builtin_cpu_supports read CPUID and XGETBV),
 * so one binary is fast on any x86-64 and correct on all. Other architectures, and compilers
 * without the -m flags configure checks, have the generic build alone. */
#include "config.h"

#include "src/backend/cpu_loops.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

extern const dp_cpu_loops dp_cpu_loops_generic;
#ifdef HAVE_CPU_LOOPS_X86
extern const dp_cpu_loops dp_cpu_loops_avx2, dp_cpu_loops_avx512;

/* Every feature the build's -m flags let the compiler use (Makefile.am). */
static int cpu_runs_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}

static int cpu_runs_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
#endif

static int cpu_runs_any(void)
{
    return 1;
}

/* Widest first. */
static const struct {
    const dp_cpu_loops *loops;
    int (*cpu_runs)(void);
} builds[] = {
#ifdef HAVE_CPU_LOOPS_X86
    {&dp_cpu_loops_avx512, cpu_runs_avx512},
    {&dp_cpu_loops_avx2, cpu_runs_avx2},
#endif
    {&dp_cpu_loops_generic, cpu_runs_any},
};

const dp_cpu_loops *dp_cpu_loops_for(const char *isa)
{
    for (size_t i = 0; i < sizeof builds / sizeof *builds; i++)
        if (strcmp(builds[i].loops->isa, isa) == 0)
            return builds[i].cpu_runs() ? builds[i].loops : NULL;
    return NULL;
}

static const dp_cpu_loops *best;

/* DPTRAIN_CPU_LOOPS names a narrower build this CPU runs (the BLAS-core matrix runs the
 * generic and avx2 loops on an AVX-512 CPU); one it does not run, or no name, gets the widest. */
static void choose_best(void)
{
    const char *asked = getenv(DP_CPU_LOOPS_VARIABLE);
    best = asked ? dp_cpu_loops_for(asked) : NULL;
    for (size_t i = 0; !best; i++)
        best = builds[i].cpu_runs() ? builds[i].loops : NULL;
}

const dp_cpu_loops *dp_cpu_loops_best(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, choose_best);
    return best;
}
