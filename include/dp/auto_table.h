/* The table `--allreduce auto` chooses from: for a world size and a message size, which
 * all-reduce algorithm. Text, one rule per line; `#` starts a comment:
 *
 *     # WORLD  MAX_BYTES  ALGORITHM
 *     2        4K         mpi
 *     2        inf        ring-pipelined
 *
 * WORLD is a rank count; MAX_BYTES a byte count (K, M, G suffixes are powers of 1024) or
 * `inf`. A message of B bytes on W ranks takes the first rule of W's group with
 * B <= MAX_BYTES. The rules of one world size come in increasing MAX_BYTES order and the
 * last is `inf`. A world size without rules uses the largest listed world size below it
 * (or, below them all, the smallest). `dp_bench --tune FILE` measures and writes such a file. */
#ifndef DP_AUTO_TABLE_H
#define DP_AUTO_TABLE_H

#include "dp/comm.h"

#include <stddef.h>

struct dp_algorithm;

typedef struct dp_auto_rule {
    int world;
    size_t max_bytes; /* SIZE_MAX: inf */
    const struct dp_algorithm *algorithm;
    int line;         /* in the source text, for messages */
} dp_auto_rule;

typedef struct dp_auto_table {
    dp_auto_rule *rules;
    size_t count;
} dp_auto_table;

/* Parses text (the contents of source, named in messages as SOURCE:LINE) into t. A malformed
 * line, an unknown algorithm, `auto` itself, rules out of order or a world size without an
 * `inf` rule is DP_EFORMAT naming the source, the line and the problem. */
int dp_auto_table_parse(const char *text, const char *source, dp_auto_table *t);

/* dp_auto_table_parse of path's contents; DP_EIO when it cannot be read. */
int dp_auto_table_read(const char *path, dp_auto_table *t);

/* The built-in table (measured on the development machine, see bench/RESULTS.md). */
int dp_auto_table_default(dp_auto_table *t);

/* Replaces t's rules for world by count rules: sizes up to max_bytes[i] use names[i]
 * (max_bytes increasing, the last SIZE_MAX). */
int dp_auto_table_set_world(dp_auto_table *t, int world, const size_t *max_bytes,
                            const char *const *names, size_t count);

/* Writes t to path atomically (temporary file, then rename), comment as the first line. */
int dp_auto_table_write(const char *path, const dp_auto_table *t, const char *comment);

/* The rule deciding a message of `bytes` on `world` ranks. */
const dp_auto_rule *dp_auto_table_pick(const dp_auto_table *t, int world, size_t bytes);

/* One line for people: "rules of W=2: mpi up to 4K, ring above" (the rules world uses), into buf. */
void dp_auto_table_describe(const dp_auto_table *t, int world, char *buf, size_t size);

/* The name of the algorithm a rule selects. */
const char *dp_auto_rule_algorithm(const dp_auto_rule *rule);

void dp_auto_table_free(dp_auto_table *t);

/* Collective: c's auto algorithm uses the table in path (NULL: the built-in one). Rank 0
 * reads the file and broadcasts its text, so every rank decides from the same bytes; all
 * ranks return the same status. */
int dp_comm_load_auto_table(dp_comm *c, const char *path);

#endif
