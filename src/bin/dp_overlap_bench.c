/* dp_overlap_bench: how much of an all-reduce hides behind computation on this machine, for
 * each way of progressing a request (no calls, a test after each piece of computation, a
 * progress thread). Pieces stand in for a backward pass's modules: single-threaded SGEMMs
 * (the CPU backend: the core is busy) or sleeps of the same length (a GPU backend: the host
 * waits while the device computes). The measurement is src/bench/overlap.c;
 * docs/ALGORITHMS.md ("Progress") shows runs. */
#include "dp/backend.h"
#include "dp/comm.h"
#include "dp/error.h"
#include "dp/overlap_bench.h"
#include "dp/units.h"

#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_FAILED = 1, EXIT_USAGE = 2, ALGORITHMS_MAX = 16 };

typedef struct options {
    size_t bytes;
    int iterations, gemm, sleep_us;
    char algorithms[256];
} options;

/* One piece: C = A B, n x n, single-threaded like a rank's BLAS; or a sleep of sleep_us. */
typedef struct piece {
    int n;
    float *a, *b, *c;
    long sleep_us;
} piece;

static void compute_piece(void *context)
{
    piece *g = context;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n,
                0.0f, g->c, g->n);
}

static void sleep_piece(void *context)
{
    const piece *g = context;
    struct timespec t = {g->sleep_us / 1000000, (g->sleep_us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpirun -np W dp_overlap_bench [OPTION]...\n"
            "Per algorithm: an all-reduce alone, SGEMM pieces alone (as many as take about as long),\n"
            "and steps that start the all-reduce, compute the pieces and wait, progressing the\n"
            "request in each way; prints the step time and the part of the all-reduce hidden.\n\n"
            "  -s, --size BYTES        bytes all-reduced (K, M, G: powers of 1024) [default: 16M]\n"
            "  -a, --algorithm LIST    comma-separated algorithms [default: mpi,ring,ring-pipelined,rhd]\n"
            "  -n, --iterations N      steps per way; medians are reported [default: 20]\n"
            "  -m, --gemm N            each piece multiplies two N x N matrices [default: 256]\n"
            "      --sleep US          each piece sleeps US microseconds instead (the host idle\n"
            "                          while a GPU computes)\n"
            "  -h, --help              print this help and exit\n");
}

static int positive(const char *text, int *value)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < 1 || v > 1 << 20)
        return 0;
    *value = (int)v;
    return 1;
}

static const struct option longopts[] = {
    {"size", required_argument, NULL, 's'}, {"algorithm", required_argument, NULL, 'a'},
    {"iterations", required_argument, NULL, 'n'}, {"gemm", required_argument, NULL, 'm'},
    {"sleep", required_argument, NULL, 'S'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};

static const char *long_name(int ch)
{
    const struct option *o = longopts;
    while (o->name && o->val != ch)
        o++;
    return o->name ? o->name : "?";
}

/* 0 to run, 1 after --help, -1 for a bad option (message on rank 0). */
static int parse(int argc, char **argv, options *o, int rank)
{
    *o = (options){.bytes = (size_t)16 << 20, .iterations = 20, .gemm = 256};
    snprintf(o->algorithms, sizeof o->algorithms, "mpi,ring,ring-pipelined,rhd");
    opterr = 0;
    for (int ch; (ch = getopt_long(argc, argv, "s:a:n:m:h", longopts, NULL)) != -1;) {
        int ok = ch == 's' ? dp_parse_bytes(optarg, &o->bytes)
                 : ch == 'a' ? (size_t)snprintf(o->algorithms, sizeof o->algorithms, "%s", optarg) < sizeof o->algorithms
                 : ch == 'n' ? positive(optarg, &o->iterations)
                 : ch == 'm' ? positive(optarg, &o->gemm)
                 : ch == 'S' ? positive(optarg, &o->sleep_us)
                             : 0;
        if (ch == 'h') {
            if (rank == 0)
                usage(stdout);
            return 1;
        }
        if (!ok) {
            if (rank == 0 && ch == '?')
                fprintf(stderr, "dp_overlap_bench: error: unknown option or missing value: %s\n\n", argv[optind - 1]);
            else if (rank == 0)
                fprintf(stderr, "dp_overlap_bench: error: --%s: bad value '%s'\n\n", long_name(ch), optarg);
            if (rank == 0)
                usage(stderr);
            return -1;
        }
    }
    return 0;
}

static int alloc_piece(piece *g, int n)
{
    size_t floats = (size_t)n * (size_t)n;
    g->n = n;
    g->a = dp_alloc(floats * sizeof(float), "the GEMM operands");
    g->b = dp_alloc(floats * sizeof(float), "the GEMM operands");
    g->c = dp_alloc(floats * sizeof(float), "the GEMM result");
    if (!g->a || !g->b || !g->c)
        return DP_ENOMEM;
    for (size_t i = 0; i < floats; i++)
        g->a[i] = g->b[i] = (float)(i % 7) * 0.125f;
    return 0;
}

static void print_result(const char *algorithm, const dp_overlap_result *r)
{
    for (int way = 0; way < DP_PROGRESS_WAYS; way++)
        printf("%-15s %-28s %9.2f %11.2f %9.2f %12.2f %7.0f%% %7.0f%%\n", algorithm, dp_progress_ways[way].name,
               1e3 * r->comm, 1e3 * r->compute, 1e3 * r->step[way], 1e3 * (r->step[way] - r->compute),
               100.0 * dp_overlap_hidden(r, way), 100.0 * dp_overlap_hidden(r, way) / dp_overlap_hideable(r));
}

static void describe_piece(const options *o, char *text, size_t size)
{
    if (o->sleep_us)
        snprintf(text, size, "sleep %d us", o->sleep_us);
    else
        snprintf(text, size, "sgemm %d^3", o->gemm);
}

static int measure_all(const options *o, piece *g, int rank, int world)
{
    char list[sizeof o->algorithms], what[64];
    memcpy(list, o->algorithms, sizeof list);
    describe_piece(o, what, sizeof what);
    dp_overlap_setup s = {.count = o->bytes / sizeof(float), .iterations = o->iterations,
                          .compute_piece = o->sleep_us ? sleep_piece : compute_piece, .context = g};
    int printed_header = 0;
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        dp_comm c;
        dp_overlap_result r;
        int status = dp_comm_init(&c, MPI_COMM_WORLD, name);
        if (!status)
            status = dp_overlap_measure(&c, &s, &r);
        dp_comm_free(&c);
        if (status)
            return status;
        if (rank == 0 && !printed_header++)
            printf("# dp_overlap_bench: %d ranks, all-reduce of %zu bytes; pieces: %s; medians of %d steps, "
                   "slowest rank\n"
                   "# algorithm     progress                     comm(ms) compute(ms)  step(ms) exposed(ms)  hidden  of max\n",
                   world, o->bytes, what, o->iterations);
        if (rank == 0) {
            printf("# %s: %d pieces of %.3f ms\n", name, r.pieces, 1e3 * r.piece);
            print_result(name, &r);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int level, rank, world;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    options o;
    int parsed = parse(argc, argv, &o, rank);
    if (parsed) {
        MPI_Finalize();
        return parsed > 0 ? EXIT_SUCCESS : EXIT_USAGE;
    }
    if (level < MPI_THREAD_MULTIPLE && rank == 0)
        printf("# MPI gives no MPI_THREAD_MULTIPLE: the thread ways are unsafe here\n");
    dp_backend_cpu_set_threads(1, "--threads");
    piece g = {.sleep_us = o.sleep_us};
    int status = alloc_piece(&g, o.gemm);
    if (!status)
        status = measure_all(&o, &g, rank, world);
    if (status) {
        fprintf(stderr, "dp_overlap_bench: rank %d: error: %s\n", rank, dp_last_error());
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILED);
    }
    free(g.a);
    free(g.b);
    free(g.c);
    MPI_Finalize();
    return EXIT_SUCCESS;
}
