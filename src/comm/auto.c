#include "dp/auto_table.h"

#include "dp/atomic_file.h"
#include "dp/error.h"
#include "dp/input_file.h"
#include "dp/units.h"
#include "src/comm/registry.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Written by `dp_bench --tune` on the development machine, 2 cores (W = 3, 4, 8
 * oversubscribed): the commands and measurements are in bench/RESULTS.md. W = 2 up to 128K:
 * rd where it measured fastest ("Recursive doubling for small messages" there). */
static const char default_table[] =
    "2   2K    rd\n"
    "2   4K    ring\n"
    "2   128K  rd\n"
    "2   16M   mpi\n"
    "2   inf   rhd\n"
    "3   64K   naive\n"
    "3   inf   ring-pipelined\n"
    "4   4     naive\n"
    "4   256   mpi\n"
    "4   2K    naive\n"
    "4   4K    rhd\n"
    "4   8K    ring-pipelined\n"
    "4   16K   naive\n"
    "4   inf   rhd\n"
    "8   1K    naive\n"
    "8   4K    rhd\n"
    "8   64K   naive\n"
    "8   1M    mpi\n"
    "8   inf   ring-pipelined\n";

static const char default_source[] = "built-in auto table";

/* A table is a few dozen lines; anything bigger is the wrong file. */
enum { TABLE_MAX_BYTES = 64 * 1024, WORLD_MAX = 1 << 20 };

/* Splits line at blanks into at most max fields (one more means too many); returns the count. */
static int split_fields(char *line, char **fields, int max)
{
    int count = 0;
    char *save = NULL;
    for (char *f = strtok_r(line, " \t\r", &save); f && count <= max; f = strtok_r(NULL, " \t\r", &save))
        fields[count++] = f;
    return count;
}

static int parse_world(const char *text, int *world)
{
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (end == text || *end || errno || value < 1 || value > WORLD_MAX)
        return 0;
    *world = (int)value;
    return 1;
}

static int parse_max_bytes(const char *text, size_t *bytes)
{
    if (strcmp(text, "inf") == 0) {
        *bytes = SIZE_MAX;
        return 1;
    }
    return dp_parse_bytes(text, bytes);
}

/* The algorithm a table may name: registered, on host memory (auto's), and not auto itself. */
static int resolve_algorithm(const char *name, const char *source, int line,
                             const struct dp_algorithm **algorithm)
{
    if (strcmp(name, dp_algorithm_auto.name) == 0)
        return dp_fail(DP_EFORMAT, "%s:%d: 'auto' cannot choose itself; name a concrete algorithm",
                       source, line);
    *algorithm = dp_algorithm_find(name);
    if (*algorithm && (*algorithm)->place != DP_BUFFER_DEVICE)
        return 0;
    char valid[512];
    dp_registered_names(valid, sizeof valid, 0);
    return dp_fail(DP_EFORMAT, "%s:%d: %s algorithm '%s' (valid: %s)", source, line,
                   *algorithm ? "auto sums host memory; not the GPU-only" : "unknown", name, valid);
}

/* Parses one line into rule; returns 1 for a rule, 0 for a blank or comment line, or an error. */
static int parse_rule(char *line, const char *source, int number, dp_auto_rule *rule)
{
    line[strcspn(line, "#")] = '\0';
    char *fields[4];
    int count = split_fields(line, fields, 3);
    if (count == 0)
        return 0;
    if (count != 3)
        return dp_fail(DP_EFORMAT, "%s:%d: expected 'WORLD MAX_BYTES ALGORITHM', found %s%d field%s",
                       source, number, count > 3 ? "more than " : "", count > 3 ? 3 : count,
                       count == 1 ? "" : "s");
    if (!parse_world(fields[0], &rule->world))
        return dp_fail(DP_EFORMAT, "%s:%d: world size '%s' must be an integer from 1 to %d",
                       source, number, fields[0], WORLD_MAX);
    if (!parse_max_bytes(fields[1], &rule->max_bytes))
        return dp_fail(DP_EFORMAT, "%s:%d: MAX_BYTES '%s' must be a byte count (digits, optional K, M or G) or inf",
                       source, number, fields[1]);
    rule->line = number;
    return resolve_algorithm(fields[2], source, number, &rule->algorithm) ? DP_EFORMAT : 1;
}

/* Each world size's rules ascend in MAX_BYTES and end with inf, so every size has a rule. */
static int check_order(const dp_auto_table *t, const char *source)
{
    for (size_t i = 0; i < t->count; i++) {
        const dp_auto_rule *r = &t->rules[i], *next_of_world = NULL;
        for (size_t j = i + 1; j < t->count && !next_of_world; j++)
            if (t->rules[j].world == r->world)
                next_of_world = &t->rules[j];
        if (next_of_world && next_of_world->max_bytes <= r->max_bytes)
            return dp_fail(DP_EFORMAT, "%s:%d: MAX_BYTES must increase over the rules of world %d (line %d has a larger or equal one)",
                           source, next_of_world->line, r->world, r->line);
        if (!next_of_world && r->max_bytes != SIZE_MAX)
            return dp_fail(DP_EFORMAT, "%s:%d: the last rule of world %d must have MAX_BYTES inf, or larger messages have no algorithm",
                           source, r->line, r->world);
    }
    if (t->count == 0)
        return dp_fail(DP_EFORMAT, "%s: no rules (expected lines 'WORLD MAX_BYTES ALGORITHM')", source);
    return 0;
}

static int parse_lines(char *text, const char *source, dp_auto_table *t)
{
    int number = 1;
    for (char *line = text; line; number++) {
        char *newline = strchr(line, '\n');
        if (newline)
            *newline = '\0';
        int status = parse_rule(line, source, number, &t->rules[t->count]);
        if (status < 0)
            return status;
        t->count += (size_t)status;
        line = newline ? newline + 1 : NULL;
    }
    return check_order(t, source);
}

int dp_auto_table_parse(const char *text, const char *source, dp_auto_table *t)
{
    t->count = 0;
    size_t lines = 1;
    for (const char *p = strchr(text, '\n'); p; p = strchr(p + 1, '\n'))
        lines++;
    char *copy = dp_alloc(strlen(text) + 1, "auto table text");
    t->rules = dp_calloc(lines, sizeof *t->rules, "auto table rules");
    int status = copy && t->rules ? parse_lines(strcpy(copy, text), source, t) : DP_ENOMEM;
    free(copy);
    if (status)
        dp_auto_table_free(t);
    return status;
}

static int read_text(const char *path, char **text, size_t *length)
{
    FILE *f = NULL;
    int status = dp_open_input(path, &f);
    if (status)
        return status;
    char *buf = dp_alloc(TABLE_MAX_BYTES + 1, "auto table text");
    size_t n = buf ? fread(buf, 1, TABLE_MAX_BYTES + 1, f) : 0;
    int failed = ferror(f) ? errno : 0;
    fclose(f);
    status = !buf ? DP_ENOMEM
                 : failed ? dp_fail(DP_EIO, "%s: cannot read the auto table: %s", path, strerror(failed))
                 : n > TABLE_MAX_BYTES
                     ? dp_fail(DP_EFORMAT, "%s: larger than %d bytes, not an auto table", path, TABLE_MAX_BYTES)
                     : 0;
    if (status) {
        free(buf);
        return status;
    }
    buf[n] = '\0';
    *text = buf;
    *length = n;
    return 0;
}

int dp_auto_table_read(const char *path, dp_auto_table *t)
{
    char *text = NULL;
    size_t length = 0;
    int status = read_text(path, &text, &length);
    if (status == 0)
        status = dp_auto_table_parse(text, path, t);
    free(text);
    return status;
}

int dp_auto_table_default(dp_auto_table *t)
{
    return dp_auto_table_parse(default_table, default_source, t);
}

static void sort_by_world(dp_auto_table *t)
{
    /* Insertion sort: stable, so each world keeps its rules' order. */
    for (size_t i = 1; i < t->count; i++) {
        dp_auto_rule r = t->rules[i];
        size_t j = i;
        for (; j > 0 && t->rules[j - 1].world > r.world; j--)
            t->rules[j] = t->rules[j - 1];
        t->rules[j] = r;
    }
}

int dp_auto_table_set_world(dp_auto_table *t, int world, const size_t *max_bytes,
                            const char *const *names, size_t count)
{
    dp_auto_rule *rules = dp_calloc(t->count + count, sizeof *rules, "auto table rules");
    if (!rules)
        return DP_ENOMEM;
    size_t kept = 0;
    for (size_t i = 0; i < t->count; i++)
        if (t->rules[i].world != world)
            rules[kept++] = t->rules[i];
    for (size_t i = 0; i < count; i++) {
        dp_auto_rule *r = &rules[kept + i];
        r->world = world;
        r->max_bytes = max_bytes[i];
        if (resolve_algorithm(names[i], "measured rules", (int)i + 1, &r->algorithm)) {
            free(rules);
            return DP_EINVAL;
        }
    }
    free(t->rules);
    t->rules = rules;
    t->count = kept + count;
    sort_by_world(t);
    return 0;
}

/* "inf", or the count with the largest suffix that divides it: 4096 -> 4K. */
static void format_max_bytes(size_t bytes, char *out, size_t size)
{
    static const char suffixes[] = "GMK";
    if (bytes == SIZE_MAX) {
        snprintf(out, size, "inf");
        return;
    }
    for (int i = 0; i < 3; i++) {
        size_t unit = (size_t)1 << (10 * (3 - i));
        if (bytes >= unit && bytes % unit == 0) {
            snprintf(out, size, "%zu%c", bytes / unit, suffixes[i]);
            return;
        }
    }
    snprintf(out, size, "%zu", bytes);
}

struct table_file {
    const dp_auto_table *table;
    const char *comment;
};

static int write_table(FILE *f, const void *context)
{
    const struct table_file *file = context;
    if (fprintf(f, "# %s\n# WORLD  MAX_BYTES  ALGORITHM   (see docs/ALGORITHMS.md)\n", file->comment) < 0)
        return -1;
    for (size_t i = 0; i < file->table->count; i++) {
        const dp_auto_rule *r = &file->table->rules[i];
        char bytes[32];
        format_max_bytes(r->max_bytes, bytes, sizeof bytes);
        if (fprintf(f, "%-8d %-10s %s\n", r->world, bytes, r->algorithm->name) < 0)
            return -1;
    }
    return 0;
}

int dp_auto_table_write(const char *path, const dp_auto_table *t, const char *comment)
{
    const struct table_file file = {t, comment};
    return dp_write_file_atomically(path, write_table, &file);
}

/* The listed world size whose rules apply: world itself, else the nearest below, else the
 * smallest listed. */
static int rules_world(const dp_auto_table *t, int world)
{
    int below = 0, smallest = INT_MAX;
    for (size_t i = 0; i < t->count; i++) {
        int w = t->rules[i].world;
        if (w <= world && w > below)
            below = w;
        if (w < smallest)
            smallest = w;
    }
    return below ? below : smallest;
}

const dp_auto_rule *dp_auto_table_pick(const dp_auto_table *t, int world, size_t bytes)
{
    int w = rules_world(t, world);
    for (size_t i = 0; i < t->count; i++)
        if (t->rules[i].world == w && bytes <= t->rules[i].max_bytes)
            return &t->rules[i];
    return NULL; /* unreachable for a parsed table: each world ends with inf */
}

void dp_auto_table_describe(const dp_auto_table *t, int world, char *buf, size_t size)
{
    int w = rules_world(t, world);
    size_t used = (size_t)snprintf(buf, size, "rules of W=%d:", w);
    int first = 1;
    for (size_t i = 0; i < t->count && used < size; i++) {
        const dp_auto_rule *r = &t->rules[i];
        if (r->world != w)
            continue;
        char bytes[32] = "up to ";
        if (r->max_bytes == SIZE_MAX)
            strcpy(bytes, first ? "at every size" : "above");
        else
            format_max_bytes(r->max_bytes, bytes + 6, sizeof bytes - 6);
        used += (size_t)snprintf(buf + used, size - used, "%s %s %s", first ? "" : ",",
                                 r->algorithm->name, bytes);
        first = 0;
    }
}

const char *dp_auto_rule_algorithm(const dp_auto_rule *rule)
{
    return rule->algorithm->name;
}

void dp_auto_table_free(dp_auto_table *t)
{
    free(t->rules);
    t->rules = NULL;
    t->count = 0;
}

/* Rank 0 reads path; every rank gets the same text, or every rank an error. */
static int broadcast_text(dp_comm *c, const char *path, char **text)
{
    long length = -1;
    size_t read_length = 0;
    int status = c->rank == 0 ? read_text(path, text, &read_length) : 0;
    if (c->rank == 0 && status == 0)
        length = (long)read_length;
    DP_MPI_CHECK(MPI_Bcast(&length, 1, MPI_LONG, 0, c->comm));
    if (length < 0)
        return c->rank == 0 ? status : dp_fail(DP_EIO, "%s: rank 0 could not read this auto table", path);
    if (c->rank != 0 && !(*text = dp_alloc((size_t)length + 1, "auto table text")))
        return DP_ENOMEM;
    DP_MPI_CHECK(MPI_Bcast(*text, (int)length, MPI_CHAR, 0, c->comm));
    (*text)[length] = '\0';
    return 0;
}

static int load_file(dp_comm *c, const char *path, dp_auto_table *t)
{
    char *text = NULL;
    int status = broadcast_text(c, path, &text);
    if (status == 0)
        status = dp_auto_table_parse(text, path, t);
    free(text);
    return status;
}

int dp_comm_load_auto_table(dp_comm *c, const char *path)
{
    dp_auto_table loaded = {0};
    int status = path ? load_file(c, path, &loaded) : dp_auto_table_default(&loaded);
    if (status)
        return status;
    if (!c->auto_table && !(c->auto_table = dp_calloc(1, sizeof *c->auto_table, "auto table"))) {
        dp_auto_table_free(&loaded);
        return DP_ENOMEM;
    }
    dp_auto_table_free(c->auto_table);
    *c->auto_table = loaded;
    return 0;
}

/* auto's pick for a message of `bytes` (the whole buffer's, for reduce-scatter and
 * all-gather too: the table is measured on all-reduces). Every rank decides from the same
 * table, world size and count, so all ranks run the same algorithm. */
static int pick(dp_comm *c, size_t bytes, const struct dp_algorithm **picked)
{
    /* The built-in table is parsed on the first call, as request slots are made on the first step. */
    if (!c->auto_table) {
        int status = dp_comm_load_auto_table(c, NULL);
        if (status)
            return status;
    }
    *picked = dp_auto_table_pick(c->auto_table, c->size, bytes)->algorithm;
    return 0;
}

struct largest_scratch {
    const dp_comm *c;
    dp_collective kind;
    size_t count, largest_block, floats;
};

static void widen(const struct dp_algorithm *a, void *context)
{
    struct largest_scratch *s = context;
    size_t n = a->scratch_floats(s->c, s->kind, s->count, s->largest_block);
    s->floats = n > s->floats ? n : s->floats;
}

/* For reserve, before any pick: the most any algorithm auto may pick needs. */
static size_t auto_scratch(const dp_comm *c, dp_collective kind, size_t count, size_t largest_block)
{
    struct largest_scratch s = {c, kind, count, largest_block, 0};
    dp_host_algorithms(widen, &s);
    return s.floats;
}

static void close_table(dp_comm *c)
{
    if (c->auto_table)
        dp_auto_table_free(c->auto_table);
    free(c->auto_table);
    c->auto_table = NULL;
}

/* auto never runs a request itself: its pick does, so its own driver is never called. */
const struct dp_algorithm dp_algorithm_auto = {
    .name = "auto",
    .summary = "picks one of the above by world size and message size from a table (dp_bench --tune)",
    .place = DP_BUFFER_HOST,
    .driver = &dp_schedule_driver,
    .scratch_floats = auto_scratch,
    .pick = pick,
    .close = close_table,
};
