/* What the run writes, checked on the rank that writes it (rank 0) before any training, so a
 * bad path fails in seconds instead of after hours: --save, --trace, --metrics and --checkpoint-dir can be
 * created there, and the checkpoint directory holds no other run's checkpoints. */
#include "src/train/trainer.h"

#include "dp/atomic_file.h"
#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/same_file.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The files a run writes, by option. */
static const struct file_option {
    const char *option;
    size_t offset; /* of the path in dp_options */
} output_options[] = {
    {"--save", offsetof(dp_options, save_path)},
    {"--trace", offsetof(dp_options, trace_path)},
    {"--metrics", offsetof(dp_options, metrics_path)},
    {"--output", offsetof(dp_options, output_path)},
}, input_options[] = {
    {"--data", offsetof(dp_options, data)},
    {"--test-data", offsetof(dp_options, test_data)},
    {"--init", offsetof(dp_options, init_path)},
    {"--resume", offsetof(dp_options, resume)},
    {"--predict", offsetof(dp_options, predict_path)},
    {"--auto-table", offsetof(dp_options, auto_table)},
};
#define COUNT(a) (sizeof a / sizeof *a)

static const char *path_of(const dp_options *o, const struct file_option *f)
{
    return (const char *)o + f->offset;
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

int dp_check_outputs_apart(const dp_options *o)
{
    for (size_t i = 0; i < COUNT(output_options); i++) {
        const char *out = path_of(o, &output_options[i]), *option = output_options[i].option;
        if (!out[0])
            continue;
        for (size_t j = i + 1; j < COUNT(output_options); j++)
            if (path_of(o, &output_options[j])[0] && dp_same_file(out, path_of(o, &output_options[j])))
                return dp_fail(DP_EINVAL, "%s %s and %s %s name one file: each would overwrite the other", option,
                               out, output_options[j].option, path_of(o, &output_options[j]));
        for (size_t j = 0; j < COUNT(input_options); j++) {
            int status = check_against_input(option, out, input_options[j].option, path_of(o, &input_options[j]));
            if (status)
                return status;
        }
        if (o->checkpoint_dir[0] && dp_checkpoint_is_name(out) && in_checkpoint_dir(out, o->checkpoint_dir))
            return dp_fail(DP_EINVAL, "%s %s lies in --checkpoint-dir %s under a checkpoint's name: checkpoints "
                           "would replace it, or pruning delete it", option, out, o->checkpoint_dir);
    }
    return 0;
}

int dp_trainer_check_outputs(const trainer *t)
{
    const dp_options *o = t->o;
    if (t->comm->rank != 0)
        return 0;
    int status = dp_check_outputs_apart(o);
    if (!status && o->save_path[0])
        status = dp_check_output_file("--save", o->save_path);
    if (!status && o->trace_path[0])
        status = dp_check_output_file("--trace", o->trace_path);
    if (!status && o->metrics_path[0])
        status = dp_check_output_file("--metrics", o->metrics_path);
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
