#include "dp/bench.h"

#include "dp/error.h"
#include "dp/units.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_TUNE = 256, OPT_AUTO_TABLE, OPT_GROUP, OPT_HIER_INNER, OPT_GRAD_DTYPE };

static const struct option long_options[] = {
    {"minbytes", required_argument, NULL, 'b'},
    {"maxbytes", required_argument, NULL, 'e'},
    {"stepfactor", required_argument, NULL, 'f'},
    {"warmup_iters", required_argument, NULL, 'w'},
    {"iters", required_argument, NULL, 'n'},
    {"rounds", required_argument, NULL, 'r'},
    {"algorithm", required_argument, NULL, 'a'},
    {"check", required_argument, NULL, 'c'},
    {"tune", required_argument, NULL, OPT_TUNE},
    {"auto-table", required_argument, NULL, OPT_AUTO_TABLE},
    {"group", required_argument, NULL, OPT_GROUP},
    {"hier-inner", required_argument, NULL, OPT_HIER_INNER},
    {"grad-dtype", required_argument, NULL, OPT_GRAD_DTYPE},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

void dp_bench_print_usage(FILE *out)
{
    fprintf(out,
            "Usage: mpirun -np W dp_bench [OPTION]...\n"
            "Times every selected all-reduce algorithm (float32 or bf16 sum) per message size, in the\n"
            "columns of nccl-tests' all_reduce_perf, and checks each result against the exact sum.\n\n"
            "  -b, --minbytes BYTES     smallest message (K, M, G suffixes: powers of 1024) [default: 4]\n"
            "  -e, --maxbytes BYTES     largest message [default: 64M]\n"
            "  -f, --stepfactor F       multiply the size by F (>= 2) between rows [default: 2]\n"
            "  -w, --warmup_iters N     untimed calls before timing each size [default: 5]\n"
            "  -n, --iters N            timed back-to-back calls per size [default: 20]\n"
            "  -r, --rounds R           sweep all sizes R times, keep each one's fastest round:\n"
            "                           filters out other processes on a shared machine [default: 1]\n"
            "  -a, --algorithm LIST     comma-separated algorithm names, or all [default: all]\n"
            "  -c, --check 0|1          count wrong elements (#wrong) after each size [default: 1]\n"
            "      --tune FILE          write the fastest algorithm per size range at this world\n"
            "                           size into the auto table FILE (keeps other world sizes)\n"
            "      --auto-table FILE    the table the auto algorithm uses [default: built-in]\n"
            "      --group GROUP        time the collectives on a group of the ranks: world, node\n"
            "                           (every node times its own; rank 0's is reported) or leaders\n"
            "                           (each node's lowest rank; the others wait) [default: world]\n"
            "      --hier-inner NAME    hier's all-reduce among the nodes' leaders [default: ring]\n"
            "      --grad-dtype fp32|bf16  what the all-reduce sends and adds, as dp_worker's: bf16\n"
            "                           rounds to bfloat16 and sends half the bytes (the sizes stay\n"
            "                           the float32 buffer's; size, algbw and busbw count bf16's)\n"
            "                           [default: fp32]\n"
            "  -h, --help               print this help and exit\n\n"
            "Algorithms: %s\n"
            "Exit status: 0 when every #wrong is 0, 1 when one is not or a run fails, 2 for bad options.\n",
            dp_comm_algorithm_names());
}

static void defaults(dp_bench_options *o)
{
    memset(o, 0, sizeof *o);
    o->min_bytes = 4;
    o->max_bytes = (size_t)64 << 20;
    o->factor = 2;
    o->warmup = 5;
    o->iters = 20;
    o->rounds = 1;
    o->check = 1;
    o->group = DP_GROUP_WORLD;
    strcpy(o->hier_inner, "ring");
}

static int parse_size(char option, const char *text, size_t min, size_t *out)
{
    if (!dp_parse_bytes(text, out) || *out < min)
        return dp_fail(DP_EINVAL, "-%c '%s': must be a byte count >= %zu (digits, optional K, M or G)",
                       option, text, min);
    return 0;
}

static int parse_int(char option, const char *text, long min, long max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max)
        return dp_fail(DP_EINVAL, "-%c '%s': must be an integer from %ld to %ld", option, text, min, max);
    *out = (int)v;
    return 0;
}

static int copy_path(const char *option, const char *text, char *dst, size_t size)
{
    if (!*text || strlen(text) >= size)
        return dp_fail(DP_EINVAL, "--%s: the file name must have 1 to %zu characters", option, size - 1);
    strcpy(dst, text);
    return 0;
}

static int copy_name(const char *option, const char *text, char *dst, size_t size)
{
    if (!*text || strlen(text) >= size)
        return dp_fail(DP_EINVAL, "%s '%s': an algorithm name has 1 to %zu characters", option, text, size - 1);
    strcpy(dst, text);
    return 0;
}

/* 1 when name is one of the registered algorithms. */
static int is_algorithm(const char *name)
{
    const char *names = dp_comm_algorithm_names();
    size_t len = strlen(name);
    for (const char *p = names; *p; p += strcspn(p, " "), p += *p == ' ')
        if (strncmp(p, name, len) == 0 && (p[len] == ' ' || p[len] == '\0'))
            return 1;
    return 0;
}

static int add_algorithm(dp_bench_options *o, const char *name, size_t len)
{
    if (o->algorithm_count == DP_BENCH_MAX_ALGORITHMS || len >= sizeof o->algorithms[0])
        return dp_fail(DP_EINVAL, "-a: too many or too long algorithm names");
    memcpy(o->algorithms[o->algorithm_count], name, len);
    o->algorithms[o->algorithm_count++][len] = '\0';
    return 0;
}

/* A comma list of names, or all; --tune leaves auto out, since auto is what it measures for. */
static int parse_algorithms(dp_bench_options *o, const char *list)
{
    const char *all = dp_comm_algorithm_names(), *separators = strcmp(list, "all") == 0 ? " " : ",";
    const char *names = strcmp(list, "all") == 0 ? all : list;
    o->algorithm_count = 0;
    for (const char *p = names;; p++) {
        size_t len = strcspn(p, separators);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        if (!is_algorithm(name))
            return dp_fail(DP_EINVAL, "-a '%s': unknown algorithm '%s' (valid: %s, or all)", list,
                           name, all);
        int status = add_algorithm(o, p, len);
        if (status)
            return status;
        p += len;
        if (!*p)
            return 0;
    }
}

static int apply_option(dp_bench_options *o, int id, const char *arg, FILE *out)
{
    switch (id) {
    case 'b': return parse_size('b', arg, 4, &o->min_bytes);
    case 'e': return parse_size('e', arg, 4, &o->max_bytes);
    case 'f': return parse_int('f', arg, 2, 1024, &o->factor);
    case 'w': return parse_int('w', arg, 0, INT_MAX, &o->warmup);
    case 'n': return parse_int('n', arg, 1, INT_MAX, &o->iters);
    case 'r': return parse_int('r', arg, 1, INT_MAX, &o->rounds);
    case 'c': return parse_int('c', arg, 0, 1, &o->check);
    case 'a': return parse_algorithms(o, arg);
    case OPT_TUNE: return copy_path("tune", arg, o->tune_path, sizeof o->tune_path);
    case OPT_AUTO_TABLE: return copy_path("auto-table", arg, o->auto_table_path, sizeof o->auto_table_path);
    case OPT_GROUP: return dp_group_parse(arg, &o->group) ? dp_fail_context(DP_EINVAL, "--group") : 0;
    case OPT_HIER_INNER: return copy_name("--hier-inner", arg, o->hier_inner, sizeof o->hier_inner);
    case OPT_GRAD_DTYPE: return dp_grad_dtype_parse(arg, &o->dtype);
    default:
        if (out)
            dp_bench_print_usage(out);
        return DP_OPTIONS_EXIT;
    }
}

static void drop_auto(dp_bench_options *o)
{
    int kept = 0;
    for (int i = 0; i < o->algorithm_count; i++)
        if (strcmp(o->algorithms[i], "auto") != 0)
            memmove(o->algorithms[kept++], o->algorithms[i], sizeof o->algorithms[i]);
    o->algorithm_count = kept;
}

static int check_combination(dp_bench_options *o)
{
    if (o->max_bytes < o->min_bytes)
        return dp_fail(DP_EINVAL, "-e %zu is below -b %zu: no message sizes to measure", o->max_bytes,
                       o->min_bytes);
    if (o->tune_path[0] && o->dtype != DP_DTYPE_F32) /* auto's table is by float32 message bytes */
        return dp_fail(DP_EINVAL, "--tune with --grad-dtype %s: the auto table is measured on float32 messages "
                       "(auto picks for a bf16 message by the bytes it sends); tune with --grad-dtype fp32",
                       dp_grad_dtype_name(o->dtype));
    if (o->tune_path[0])
        drop_auto(o);
    if (o->algorithm_count == 0)
        return dp_fail(DP_EINVAL, "--tune needs algorithms other than auto to choose from");
    return 0;
}

/* getopt's verdict on argv[optind - 1]: an unknown option, or one missing its value. */
static int getopt_error(int id, char **argv)
{
    char name[64];
    const char *arg = argv[optind - 1];
    if (strncmp(arg, "--", 2) != 0 && optopt > 0 && optopt < 128)
        snprintf(name, sizeof name, "-%c", optopt);
    else
        snprintf(name, sizeof name, "%s", arg);
    return dp_fail(DP_EINVAL, "%s: %s", name, id == ':' ? "missing value" : "unknown option");
}

int dp_bench_options_parse(dp_bench_options *o, int argc, char **argv, FILE *out)
{
    defaults(o);
    int status = parse_algorithms(o, "all");
    opterr = 0; /* our messages name the option; getopt's would print once per rank */
    optind = 0; /* GNU getopt: a full re-initialisation, so tests can parse repeatedly */
    /* The leading ':' makes getopt tell a missing value (':') from an unknown option ('?'). */
    for (int id; status == 0 && (id = getopt_long(argc, argv, ":b:e:f:w:n:r:a:c:h", long_options, NULL)) != -1;)
        status = id == '?' || id == ':' ? getopt_error(id, argv) : apply_option(o, id, optarg, out);
    if (status)
        return status;
    if (optind < argc)
        return dp_fail(DP_EINVAL, "'%s': unexpected argument", argv[optind]);
    return check_combination(o);
}
