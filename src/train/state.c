/* Training state in files: initial parameters (drawn or --init), --resume, checkpoints and
 * --save. Rank 0 reads and writes; MPI_Bcast keeps every replica identical. */
#include "config.h"

#include "src/train/trainer.h"

#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS (2 * DP_MLP_MAX_LAYERS + 1)
#define VELOCITY_NAME "optimizer.momentum_buffer"

/* The configuration a checkpoint records; the first COMPATIBILITY_KEYS must match to resume
 * (they fix the model and which samples each step sees), the rest are informative. */
enum { COMPATIBILITY_KEYS = 6, CHECKPOINT_KEYS = 20 };
static const char *const checkpoint_keys[CHECKPOINT_KEYS] = {
    "layers", "step_batch", "drop_last", "seed", "train_samples", "has_momentum_buffer",
    "step", "format", "dptrain_version", "epoch", "sampler", "batch", "accum", "world_size",
    "allreduce", "lr", "lr_schedule", "momentum", "weight_decay", "total_steps"};

typedef struct checkpoint_values {
    char text[CHECKPOINT_KEYS][96];
} checkpoint_values;

static void canonical_layers(const dp_options *o, char *text, size_t size)
{
    size_t used = 0;
    for (int i = 0; i < o->nwidths && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%d", i ? "," : "", o->widths[i]);
}

static void describe_run(const trainer *t, checkpoint_values *v)
{
    const dp_options *o = t->o;
    char(*s)[96] = v->text;
    canonical_layers(o, s[0], sizeof s[0]);
    snprintf(s[1], sizeof s[1], "%zu", t->plan.step_batch);
    snprintf(s[2], sizeof s[2], "%d", o->drop_last);
    snprintf(s[3], sizeof s[3], "%llu", (unsigned long long)o->seed);
    snprintf(s[4], sizeof s[4], "%zu", t->train->count);
    snprintf(s[5], sizeof s[5], "%d", o->momentum != 0.0f);
    snprintf(s[6], sizeof s[6], "%ld", t->steps_done);
    snprintf(s[7], sizeof s[7], "pt");
    snprintf(s[8], sizeof s[8], "%s", PACKAGE_VERSION);
    snprintf(s[9], sizeof s[9], "%ld", t->steps_done / t->plan.steps_per_epoch);
    snprintf(s[10], sizeof s[10], "permutation from (seed, epoch); no other random state");
    snprintf(s[11], sizeof s[11], "%ld", o->batch);
    snprintf(s[12], sizeof s[12], "%ld", o->accum);
    snprintf(s[13], sizeof s[13], "%d", t->comm->size);
    snprintf(s[14], sizeof s[14], "%s", dp_comm_algorithm_name(t->comm));
    snprintf(s[15], sizeof s[15], "%.9g", o->lr);
    snprintf(s[16], sizeof s[16], "%s", o->lr_schedule == DP_LR_COSINE ? "cosine" : "constant");
    snprintf(s[17], sizeof s[17], "%.9g", o->momentum);
    snprintf(s[18], sizeof s[18], "%.9g", o->weight_decay);
    snprintf(s[19], sizeof s[19], "%ld", t->plan.total_steps);
}

/* Model tensors over host_params, then the momentum buffer when there is one. */
static int state_tensors(const trainer *t, dp_tensor_ref *refs)
{
    int count = 2 * (t->o->nwidths - 1);
    dp_mlp_tensor_refs(t->o->widths, t->o->nwidths, t->host_params, refs);
    if (!t->opt.velocity)
        return count;
    dp_tensor_ref *v = &refs[count];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, VELOCITY_NAME);
    v->ndim = 1;
    v->shape[0] = (int64_t)t->plan.nparams;
    v->data = t->host_velocity;
    return count + 1;
}

static void download_state(trainer *t)
{
    size_t bytes = t->plan.nparams * sizeof(float);
    t->be->download(t->host_params, t->model.params, bytes);
    if (t->opt.velocity)
        t->be->download(t->host_velocity, t->opt.velocity, bytes);
}

int dp_trainer_checkpoint(trainer *t)
{
    if (t->comm->rank != 0)
        return 0;
    download_state(t);
    dp_tensor_ref refs[MAX_TENSORS];
    int count = state_tensors(t, refs);
    checkpoint_values v;
    describe_run(t, &v);
    const char *values[CHECKPOINT_KEYS];
    for (int i = 0; i < CHECKPOINT_KEYS; i++)
        values[i] = v.text[i];
    return dp_checkpoint_save(t->o->checkpoint_dir, t->steps_done, refs, count, checkpoint_keys,
                              values, CHECKPOINT_KEYS, (int)t->o->keep);
}

static int check_compatible(const trainer *t, const char *path, const dp_meta *saved)
{
    checkpoint_values mine;
    describe_run(t, &mine);
    for (int i = 0; i < COMPATIBILITY_KEYS; i++)
        if (strcmp(saved[i].value, mine.text[i]) != 0)
            return dp_fail(DP_EINVAL, "--resume %s: the checkpoint has %s=%s but this run has %s=%s; "
                           "it cannot continue a different model or sample order",
                           path, saved[i].key, saved[i].value[0] ? saved[i].value : "(missing)",
                           saved[i].key, mine.text[i]);
    return 0;
}

/* Rank 0: loads the checkpoint into the host buffers and returns its step. */
static int load_checkpoint(trainer *t, long *step)
{
    char path[DP_PATH_MAX + 64];
    int status = dp_checkpoint_find(t->o->resume, path, sizeof path);
    dp_meta meta[CHECKPOINT_KEYS];
    for (int i = 0; i < CHECKPOINT_KEYS; i++)
        snprintf(meta[i].key, sizeof meta[i].key, "%s", checkpoint_keys[i]);
    dp_tensor_ref refs[MAX_TENSORS];
    int count = state_tensors(t, refs);
    /* The configuration first, so an incompatible run is named as such, not as a shape. */
    if (!status)
        status = dp_safetensors_read_with_metadata(path, NULL, 0, meta, CHECKPOINT_KEYS);
    if (!status)
        status = check_compatible(t, path, meta);
    if (!status)
        status = dp_checkpoint_load(path, refs, count, meta, CHECKPOINT_KEYS);
    if (status)
        return status;
    *step = strtol(meta[6].value, NULL, 10);
    if (*step < 0 || *step > t->plan.total_steps)
        return dp_fail(DP_EINVAL, "--resume %s: checkpoint step %ld is outside this run's %ld steps",
                       path, *step, t->plan.total_steps);
    if (!t->o->quiet)
        printf("resume: %s at step %ld (saved by %s ranks with all-reduce %s%s)\n", path, *step,
               meta[13].value, meta[14].value,
               atoi(meta[13].value) == t->comm->size && strcmp(meta[14].value, dp_comm_algorithm_name(t->comm)) == 0
                   ? ": continuing bit-exactly"
                   : "; the world size or algorithm differs, so results match to float rounding, not bitwise");
    return 0;
}

static int load_or_draw_params(const dp_options *o, float *host_params)
{
    if (!o->init_path[0]) {
        dp_mlp_init_uniform(o->widths, o->nwidths, o->seed, host_params);
        return 0;
    }
    dp_tensor_ref refs[2 * DP_MLP_MAX_LAYERS];
    dp_mlp_tensor_refs(o->widths, o->nwidths, host_params, refs);
    return dp_safetensors_read(o->init_path, refs, 2 * (o->nwidths - 1));
}

int dp_train_init_params(const dp_options *o, dp_comm *comm, float *host_params)
{
    size_t nparams = dp_mlp_param_count(o->widths, o->nwidths);
    if (comm->rank == 0) {
        int status = load_or_draw_params(o, host_params);
        if (status)
            return status;
    }
    return dp_comm_broadcast(comm, host_params, nparams * sizeof(float), 0);
}

/* Rank 0's resumed step, momentum buffer and parameters to every rank. */
static int resume(trainer *t)
{
    long step = 0;
    int status = t->comm->rank == 0 ? load_checkpoint(t, &step) : 0;
    size_t bytes = t->plan.nparams * sizeof(float);
    if (!status)
        status = dp_comm_broadcast(t->comm, &step, sizeof step, 0);
    if (!status)
        status = dp_comm_broadcast(t->comm, t->host_params, bytes, 0);
    if (!status && t->opt.velocity)
        status = dp_comm_broadcast(t->comm, t->host_velocity, bytes, 0);
    if (status)
        return status;
    if (t->opt.velocity)
        t->be->upload(t->opt.velocity, t->host_velocity, bytes);
    t->start_step = t->steps_done = step;
    return 0;
}

int dp_trainer_start_state(trainer *t)
{
    int status = t->o->resume[0] ? resume(t) : dp_train_init_params(t->o, t->comm, t->host_params);
    if (!status)
        t->be->upload(t->model.params, t->host_params, t->plan.nparams * sizeof(float));
    return status;
}

static int save_params(const trainer *t)
{
    char steps[32], seed[32];
    snprintf(steps, sizeof steps, "%ld", t->steps_done);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->o->seed);
    const char *keys[] = {"format", "dptrain_version", "layers", "steps", "seed"};
    const char *values[] = {"pt", PACKAGE_VERSION, t->o->layers_spec, steps, seed};
    dp_tensor_ref refs[2 * DP_MLP_MAX_LAYERS];
    dp_mlp_tensor_refs(t->o->widths, t->o->nwidths, t->host_params, refs);
    return dp_safetensors_write(t->o->save_path, refs, 2 * (t->o->nwidths - 1), keys, values, 5);
}

int dp_trainer_export(trainer *t, float *host_params_out)
{
    t->be->download(t->host_params, t->model.params, t->plan.nparams * sizeof(float));
    if (host_params_out)
        memcpy(host_params_out, t->host_params, t->plan.nparams * sizeof(float));
    return t->comm->rank == 0 && t->o->save_path[0] ? save_params(t) : 0;
}
