/* What the run writes, checked on the rank that writes it (rank 0) before any training, so a
 * bad path fails in seconds instead of after hours: the files the option rows mark written
 * (--save, --trace, --metrics, --output) and --checkpoint-dir can be created there, none is
 * another or a file an input option names, and the checkpoint directory holds no other run's
 * checkpoints. */
#include "src/train/trainer.h"

#include "src/train/option_table.h"

#include "dp/atomic_file.h"
#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/same_file.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The path row r's option gave (a TEXT row's field). */
static const char *path_of(const dp_options *o, const dp_option_row *r)
{
    return (const char *)o + r->field;
}

/* The output refused when it is one of the files of an input option (each comma-separated
 * part: a .npy pair names two). */
static int check_against_input(const char *out_option, const char *out, const char *in_option, const char *spec)
{
    char part[DP_PATH_MAX];
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, ",");
        snprintf(part, sizeof part, "%.*s", (int)len, p);
        if (dp_same_file(out, part))
            return dp_fail(DP_EINVAL, "%s %s is a file %s reads (%s): writing it would destroy the input",
                           out_option, out, in_option, part);
        p += len + (p[len] == ',');
    }
    return 0;
}

/* A path's directory compared with --checkpoint-dir: by identity, or as text while it does not exist. */
static int in_checkpoint_dir(const char *path, const char *dir)
{
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : 0, dir_len = strlen(dir);
    while (dir_len > 1 && dir[dir_len - 1] == '/')
        dir_len--;
    return dp_file_in_dir(path, dir) || (slash && len == dir_len && strncmp(path, dir, len) == 0);
}

/* Output row i's file (option out) against the other files the options name: no later output
 * names it too, and no input is it. */
static int check_against_others(const dp_options *o, int i, const char *option, const char *out)
{
    for (int j = 0; j < dp_option_row_count; j++) {
        const dp_option_row *other = &dp_option_rows[j];
        const char *path = path_of(o, other);
        char other_option[64];
        snprintf(other_option, sizeof other_option, "--%s", other->name);
        int status = other->file == DP_FILE_READ ? check_against_input(option, out, other_option, path) : 0;
        if (status)
            return status;
        if (other->file == DP_FILE_WRITTEN && j > i && path[0] && dp_same_file(out, path))
            return dp_fail(DP_EINVAL, "%s %s and %s %s name one file: each would overwrite the other", option, out,
                           other_option, path);
    }
    return 0;
}

int dp_check_outputs_apart(const dp_options *o)
{
    for (int i = 0; i < dp_option_row_count; i++) {
        const char *out = path_of(o, &dp_option_rows[i]);
        char option[64];
        snprintf(option, sizeof option, "--%s", dp_option_rows[i].name);
        if (dp_option_rows[i].file != DP_FILE_WRITTEN || !out[0])
            continue;
        int status = check_against_others(o, i, option, out);
        if (status)
            return status;
        if (o->checkpoint_dir[0] && dp_checkpoint_dir_owns(out) && in_checkpoint_dir(out, o->checkpoint_dir))
            return dp_fail(DP_EINVAL, "%s %s lies in --checkpoint-dir %s under a name checkpointing uses (a "
                           "checkpoint's, a shard's or a temporary's): checkpoints would replace it, or pruning "
                           "and clean-up delete it", option, out, o->checkpoint_dir);
    }
    return 0;
}

int dp_trainer_check_outputs(const trainer *t)
{
    const dp_options *o = t->o;
    if (t->comm->rank != 0)
        return 0;
    int status = dp_check_outputs_apart(o);
    for (int i = 0; !status && i < dp_option_row_count; i++) {
        const dp_option_row *r = &dp_option_rows[i];
        char option[64];
        snprintf(option, sizeof option, "--%s", r->name);
        if (r->file == DP_FILE_WRITTEN && path_of(o, r)[0])
            status = dp_check_output_file(option, path_of(o, r));
    }
    if (!status && o->checkpoint_dir[0])
        status = dp_check_output_dir("--checkpoint-dir", o->checkpoint_dir);
    return status;
}

static int claim_on_rank0(trainer *t)
{
    const dp_options *o = t->o;
    /* A resumed run keeps the identity its checkpoint recorded (load_checkpoint set it). */
    if (!t->resumed)
        dp_checkpoint_new_run_id(t->run_id);
    if (!o->checkpoint_dir[0])
        return 0;
    struct stat st;
    t->made_checkpoint_dir = stat(o->checkpoint_dir, &st) != 0;
    long later = -1;
    int status = dp_checkpoint_claim_dir(o->checkpoint_dir, t->run_id, t->start_step, &later);
    if (!status && later >= 0)
        fprintf(stderr, "dp_worker: warning: --checkpoint-dir %s holds checkpoints of this run up "
                "to step %ld, beyond the starting step %ld: they are replaced as training "
                "reaches them, and until then --resume of the directory picks step %ld\n",
                o->checkpoint_dir, later, t->start_step, later);
    return status;
}

void dp_trainer_drop_empty_checkpoint_dir(const trainer *t)
{
    if (t->made_checkpoint_dir)
        rmdir(t->o->checkpoint_dir); /* fails, leaving it, unless it is empty */
}

int dp_trainer_claim_checkpoint_dir(trainer *t)
{
    int status = t->comm->rank == 0 ? claim_on_rank0(t) : 0;
    /* Every rank writes its own shard with the run's identity (--checkpoint-shards). */
    return status ? status : dp_comm_broadcast(t->comm, t->run_id, sizeof t->run_id, 0);
}
