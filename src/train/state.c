/* Training state in files: the initial model (drawn or --init), --resume, checkpoints and
 * --save. Tensor names come from the model's parameter table and the optimizer; the run's
 * settings are run_fields.c's. Rank 0 reads
 * and writes whole files; what a ZeRO stage shards is gathered to it and scattered back
 * (dp_strategy_gather, dp_strategy_scatter), what is replicated is broadcast. --checkpoint-shards
 * writes and reads per-rank files instead (shards.c). */
#include "config.h"

#include "src/train/run_fields.h"

#include "dp/checkpoint.h"
#include "dp/error.h"
#include "dp/safetensors.h"
#include "dp/zero_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Host copies for checkpoints and checks, one per state buffer of the engine: whole where the
 * buffer is replicated, and on rank 0 where it reads or writes whole files (--init, --save, a
 * gathered checkpoint or a resume; the optimizer state only for the last two); a rank's part
 * elsewhere (ZeRO-3 draws or reads its initial shard itself, and writes a gathered checkpoint
 * alone whole). */
int dp_trainer_allocate_host_copies(trainer *t)
{
    const dp_options *o = t->o;
    dp_state_buffer params = dp_engine_state(t->engine, DP_STATE_PARAMETERS);
    int root = t->comm->rank == 0, zero3 = dp_state_is_sharded(&params), ok = 1;
    /* ZeRO-3 reads its shard's parts of --init and --resume files and streams --save; only a
     * gathered checkpoint it writes needs whole copies on rank 0. */
    int whole_files = (o->checkpoint_dir[0] && !o->checkpoint_shards) || (o->resume[0] && !zero3);
    for (int i = 0; ok && i < dp_engine_state_count(t->engine); i++) {
        dp_state_buffer b = dp_engine_state(t->engine, i);
        size_t floats = (root && whole_files) || !dp_state_is_sharded(&b) ? b.floats : dp_range_size(b.held);
        ok = (t->host.state[i] = dp_alloc((floats ? floats : 1) * sizeof(float), b.name)) != NULL;
    }
    t->host.rank_hashes = dp_calloc((size_t)t->comm->size, sizeof *t->host.rank_hashes, "replica hashes");
    if (ok && zero3) {
        dp_zero_plan_input layout;
        dp_strategy_plan_input(dp_engine_strategy(t->engine), &layout);
        ok = (t->host.gathered = dp_alloc((layout.unit_floats ? layout.unit_floats : 1) * sizeof(float),
                                          "the host copy of a unit's gathered parameters")) != NULL;
    }
    return ok && t->host.rank_hashes ? 0 : DP_ENOMEM;
}

/* The tensors of state buffer i over its host copy (the model's by their names, the optimizer's
 * whole as one flat tensor); returns their count. */
static int buffer_tensors(const trainer *t, int i, dp_tensor_ref *refs)
{
    dp_state_buffer b = dp_engine_state(t->engine, i);
    if (b.tensors)
        return dp_params_refs(b.tensors, t->host.state[i], b.counters, refs);
    refs[0] = (dp_tensor_ref){.ndim = 1, .shape = {(int64_t)b.floats}, .data = t->host.state[i]};
    snprintf(refs[0].name, sizeof refs[0].name, "%s", b.name);
    return 1;
}

/* AdamW's step count: state too, a scalar. */
static int step_tensor(trainer *t, dp_tensor_ref *refs)
{
    int64_t *steps = dp_engine_update_count(t->engine);
    if (!steps)
        return 0;
    refs[0] = (dp_tensor_ref){.name = "optimizer.step", .dtype = DP_DTYPE_I64, .data = steps};
    return 1;
}

/* The tensors of state buffers [first, last), then (with_step) the optimizer's step count. */
static int state_tensors(trainer *t, int first, int last, int with_step, dp_tensor_ref *refs)
{
    int count = 0;
    for (int i = first; i < last; i++)
        count += buffer_tensors(t, i, refs + count);
    return count + (with_step ? step_tensor(t, refs + count) : 0);
}

/* The model's tensors: parameters and statistics. */
static int model_tensors(trainer *t, dp_tensor_ref *refs)
{
    return state_tensors(t, DP_STATE_PARAMETERS, DP_STATE_OPTIMIZER, 0, refs);
}

/* Everything a checkpoint holds. */
static int all_tensors(trainer *t, dp_tensor_ref *refs)
{
    return state_tensors(t, DP_STATE_PARAMETERS, dp_engine_state_count(t->engine), 1, refs);
}

static int tensor_capacity(const trainer *t)
{
    const dp_model *m = dp_engine_model(t->engine);
    return m->params.count + m->buffers.count + DP_OPTIMIZER_MAX_STATE + 1;
}

/* Whether this rank holds only a shard of the parameters (ZeRO-3): whole files are then read
 * in parts, each rank its shard, and --save is streamed. */
static int params_sharded(const trainer *t)
{
    dp_state_buffer params = dp_engine_state(t->engine, DP_STATE_PARAMETERS);
    return dp_state_is_sharded(&params);
}

/* Collective: state buffers [first, last) whole in rank root's host copies (every rank's when
 * root < 0). */
static int collect_state(trainer *t, int first, int last, int root)
{
    int status = 0;
    for (int i = first; !status && i < last; i++)
        status = dp_engine_gather_state(t->engine, i, t->host.state[i], root);
    return status;
}


/* Rank 0 writes DIR/step-N.safetensors: everything, or with shards the index alone (the
 * buffers, the step count and how many shards there are). */
static int write_checkpoint(trainer *t, int shards)
{
    dp_tensor_ref *refs = dp_calloc((size_t)tensor_capacity(t), sizeof *refs, "checkpoint tensor list");
    run_fields *f = dp_alloc(sizeof *f, "checkpoint metadata");
    int status = refs && f ? 0 : DP_ENOMEM;
    if (!status) {
        const char *keys[FIELD_COUNT + 1], *values[FIELD_COUNT + 1];
        char world[16];
        /* An index holds the statistics and the step count; the shards the flat buffers. */
        int count = shards ? state_tensors(t, DP_STATE_STATISTICS, DP_STATE_OPTIMIZER, 1, refs) : all_tensors(t, refs);
        int meta = dp_run_fields_metadata(t, f, keys, values);
        if (shards) {
            snprintf(world, sizeof world, "%d", t->comm->size);
            keys[meta] = DP_CHECKPOINT_SHARDS_KEY;
            values[meta++] = world;
        }
        status = dp_checkpoint_save(t->o->checkpoint_dir, dp_engine_steps_done(t->engine), refs, count, keys, values,
                                    meta, t->o->keep);
    }
    free(refs);
    free(f);
    return status;
}

int dp_trainer_checkpoint(trainer *t)
{
    int shards = t->o->checkpoint_shards, status;
    if (shards) {
        run_fields *f = dp_alloc(sizeof *f, "checkpoint metadata");
        const char *keys[FIELD_COUNT], *values[FIELD_COUNT];
        status = f ? dp_trainer_write_shard(t, keys, values, dp_run_fields_metadata(t, f, keys, values)) : DP_ENOMEM;
        free(f);
        if (!status)
            status = collect_state(t, DP_STATE_STATISTICS, DP_STATE_OPTIMIZER, 0);
    } else {
        status = collect_state(t, DP_STATE_PARAMETERS, dp_engine_state_count(t->engine), 0);
    }
    return status || t->comm->rank != 0 ? status : write_checkpoint(t, shards);
}


/* The step, a whole number the checkpoint reader has checked, within this run. */
static int resumed_step(const char *path, const char *text, long total, long *step)
{
    *step = strtol(text, NULL, 10);
    if (*step > total)
        return dp_fail(DP_EINVAL, "--resume %s: checkpoint step %ld is beyond this run's %ld steps", path, *step, total);
    return 0;
}

/* How many shards an index names: a whole number from 1 to 2^20 ("": a whole file, 0). */
static int shard_count(const char *path, const char *text, int *shards)
{
    char *end;
    long n = text[0] ? strtol(text, &end, 10) : 0;
    if (text[0] && (*end || n < 1 || n > 1 << 20))
        return dp_fail(DP_EFORMAT, "%s: metadata %s '%s' is not a shard count", path, DP_CHECKPOINT_SHARDS_KEY, text);
    *shards = (int)n;
    return 0;
}

/* Where a resume starts, as rank 0 found it. */
typedef struct resume_point {
    long step;
    int shards; /* the index's shard count; 0: a whole file */
    char path[DP_PATH_MAX + 64];
    char run_id[DP_CHECKPOINT_RUN_ID_LEN + 1]; /* shards must carry the index's */
} resume_point;

/* Rank 0: the checkpoint's settings checked against this run's, then what the file holds
 * into the host copies: everything, an index's buffers and step count, or (ZeRO-3) the
 * buffers, the step count and rank 0's parts of the rest. */
static int load_checkpoint(trainer *t, const char *spec, resume_point *at)
{
    char changed[1024];
    char skipped[2048];
    int status = dp_checkpoint_find(spec, at->path, sizeof at->path, skipped, sizeof skipped);
    if (!status && skipped[0])
        fprintf(stderr, "dp_worker: warning: --resume %s: passed over incomplete checkpoints: %s\n", spec, skipped);
    dp_meta *meta = dp_calloc(FIELD_COUNT + 1, sizeof *meta, "checkpoint metadata");
    run_fields *mine = dp_alloc(sizeof *mine, "checkpoint metadata");
    dp_tensor_ref *refs = dp_calloc((size_t)tensor_capacity(t), sizeof *refs, "checkpoint tensor list");
    if (!meta || !mine || !refs)
        status = DP_ENOMEM;
    for (int i = 0; !status && i < FIELD_COUNT; i++)
        snprintf(meta[i].key, sizeof meta[i].key, "%s", dp_run_field_key(i));
    if (!status)
        snprintf(meta[FIELD_COUNT].key, sizeof meta[FIELD_COUNT].key, DP_CHECKPOINT_SHARDS_KEY);
    /* The configuration first, so an incompatible run is named as such, not as a shape. */
    if (!status)
        status = dp_checkpoint_read_metadata(at->path, meta, FIELD_COUNT + 1);
    if (!status)
        status = shard_count(at->path, meta[FIELD_COUNT].value, &at->shards);
    if (!status) {
        dp_run_fields_describe(t, mine);
        status = dp_run_fields_compare(at->path, mine, meta, changed, sizeof changed);
    }
    int count = 0;
    if (!status && (at->shards || params_sharded(t)))
        count = state_tensors(t, DP_STATE_STATISTICS, DP_STATE_OPTIMIZER, 1, refs);
    else if (!status)
        count = all_tensors(t, refs);
    if (!status)
        status = dp_checkpoint_load(at->path, refs, count, meta, FIELD_COUNT + 1);
    if (!status)
        status = dp_train_check_loaded("--resume", at->path, refs, count);
    if (!status && !at->shards && params_sharded(t)) /* ZeRO-3: this rank's parts alone */
        status = dp_trainer_read_own_parts(t, "--resume", at->path, 1);
    if (!status)
        status = resumed_step(at->path, meta[FIELD_STEP].value, t->plan.total_steps, &at->step);
    int64_t *updates = dp_engine_update_count(t->engine);
    if (!status && updates && *updates > at->step) /* every update is a step; a skipped step is no update */
        status = dp_fail(DP_EFORMAT, "--resume %s: optimizer.step is %lld but the checkpoint is at step %ld: more "
                         "updates than steps", at->path, (long long)*updates, at->step);
    if (!status) { /* a resumed run keeps its identity, so its files stay its own */
        memcpy(t->run_id, meta[FIELD_RUN_ID].value, DP_CHECKPOINT_RUN_ID_LEN); /* checked: 16 hex digits */
        t->run_id[DP_CHECKPOINT_RUN_ID_LEN] = '\0';
        memcpy(at->run_id, t->run_id, sizeof at->run_id);
    }
    char best_note[160] = "";
    if (!status)
        status = dp_best_restore(&t->best, at->path, meta[FIELD_BEST_METRIC].value, meta[FIELD_BEST_VALUE].value,
                                 meta[FIELD_BEST_STEP].value, meta[FIELD_EVALS_SINCE_BEST].value,
                                 meta[FIELD_BEST_STEPS].value, best_note, sizeof best_note);
    if (!status && !t->o->quiet)
        printf("resume: %s at step %ld%s: %s%s%s\n", at->path, at->step, at->shards ? " (sharded)" : "",
               changed[0] ? "continuing, but not bit-exactly, because these settings changed: " : "continuing bit-exactly",
               changed, best_note);
    free(meta);
    free(mine);
    free(refs);
    return status;
}

/* Rank 0's host copies of state buffers [first, last) to every rank: broadcast where
 * replicated, scattered where sharded, then into backend memory. */
static int share_state(trainer *t, int first, int last)
{
    int status = 0;
    for (int i = first; !status && i < last; i++)
        status = dp_engine_scatter_state(t->engine, i, t->host.state[i], 0);
    return status;
}

/* Rank 0's statistics and the optimizer's step count to every rank (what an index or, under
 * ZeRO-3, rank 0's read of a whole file gives all). */
static int share_statistics_and_step(trainer *t)
{
    int status = share_state(t, DP_STATE_STATISTICS, DP_STATE_OPTIMIZER);
    return status ? status : dp_engine_share_update_count(t->engine, 0);
}

/* ZeRO-3 from a whole checkpoint: rank 0 has checked it and read its parts; its statistics and
 * step count to every rank, and the others read their parts now. */
static int share_own_parts(trainer *t, const char *path)
{
    int status = share_statistics_and_step(t);
    if (!status && t->comm->rank != 0)
        status = dp_trainer_read_own_parts(t, "--resume", path, 1);
    if (!status)
        dp_trainer_upload_own_parts(t, 1);
    return status;
}

static int resume(trainer *t, const char *spec)
{
    resume_point at = {0};
    int status = t->comm->rank == 0 ? load_checkpoint(t, spec, &at) : 0;
    if (!status)
        status = dp_comm_broadcast(t->comm, &at, sizeof at, 0);
    if (!status) /* every rank judges the evaluations alike from rank 0's reading */
        status = dp_comm_broadcast(t->comm, &t->best, sizeof t->best, 0);
    if (!status && !at.shards && params_sharded(t))
        status = share_own_parts(t, at.path);
    else if (!status && !at.shards && !(status = share_state(t, DP_STATE_PARAMETERS, dp_engine_state_count(t->engine))))
        status = dp_engine_share_update_count(t->engine, 0);
    /* A sharded checkpoint: every rank reads its own part of the shards. */
    if (!status && at.shards && !(status = share_statistics_and_step(t))) {
        memcpy(t->run_id, at.run_id, sizeof t->run_id);
        status = dp_trainer_read_shards(t, at.path, at.step, at.shards);
    }
    t->start_step = at.step;
    dp_engine_resume_at(t->engine, at.step);
    t->resumed = 1;
    return status;
}

/* --resume auto, collective: the newest complete checkpoint in --checkpoint-dir, as rank 0
 * found it; "" when there is none. */
static int find_auto_checkpoint(trainer *t, char *path, size_t size)
{
    int status = 0;
    if (t->comm->rank == 0) {
        char skipped[2048];
        status = dp_checkpoint_find_complete(t->o->checkpoint_dir, path, size, skipped, sizeof skipped);
        if (!status && skipped[0])
            fprintf(stderr, "dp_worker: warning: --resume auto: passed over incomplete checkpoints in %s: %s\n",
                    t->o->checkpoint_dir, skipped);
        if (!status && !path[0] && !t->o->quiet)
            printf("resume: auto: no complete checkpoint in %s: starting %s\n", t->o->checkpoint_dir,
                   t->o->init_path[0] ? "from --init" : "afresh");
    }
    return status ? status : dp_comm_broadcast(t->comm, path, size, 0);
}

/* After a failed --init: 1 with the message replaced when the file is a sharded checkpoint's
 * index or shard (their parameters are elsewhere, or flat), not which tensor is missing. */
static int explained_as_sharded(const char *path, int status)
{
    dp_meta meta[2] = {{.key = DP_CHECKPOINT_SHARDS_KEY}, {.key = "shard_begin"}};
    if (dp_safetensors_read_with_metadata(path, NULL, 0, meta, 2) != 0)
        return 0;
    if (meta[0].value[0])
        return dp_fail(status, "--init %s is the index of a sharded checkpoint (%s shards; the parameters are in "
                       "its shard files): continue it with --resume %s", path, meta[0].value, path) != 0;
    if (meta[1].value[0])
        return dp_fail(status, "--init %s is one rank's shard of a sharded checkpoint (a flat slice of the "
                       "parameters): continue it with --resume and the index, step-N.safetensors beside it", path) != 0;
    return 0;
}

int dp_trainer_load_model_part(const dp_options *o, const dp_model *m, dp_range part, float *params, float *buffers,
                               int64_t *counters)
{
    if (!o->init_path[0]) {
        dp_model_init_slice(m, o->seed, part.begin, part.end, params, buffers, counters);
        return 0;
    }
    int count = m->params.count + m->buffers.count;
    dp_tensor_part *parts = dp_calloc((size_t)count, sizeof *parts, "the --init tensor list");
    dp_tensor_ref *buffer_refs = dp_calloc((size_t)m->buffers.count + 1, sizeof *buffer_refs, "the --init tensor list");
    int status = parts && buffer_refs ? 0 : DP_ENOMEM;
    if (!status) {
        dp_params_parts(&m->params, part, params, parts);
        dp_params_refs(&m->buffers, buffers, counters, buffer_refs);
        for (int i = 0; i < m->buffers.count; i++) /* the buffers whole */
            parts[m->params.count + i] = (dp_tensor_part){buffer_refs[i], 0, (size_t)dp_tensor_numel(&buffer_refs[i])};
        /* Strictly: a tensor with no place in the model means another model's file. The optimizer's
         * state of a checkpoint is --resume's, not the model's: --init leaves it. */
        status = dp_safetensors_read_parts_strict(o->init_path, parts, count, "optimizer.");
        if (status && !explained_as_sharded(o->init_path, status))
            status = dp_fail_context(status, "--init");
        else if (!status)
            status = dp_trainer_check_parts("--init", o->init_path, parts, count);
    }
    free(parts);
    free(buffer_refs);
    return status;
}

int dp_trainer_load_model(const dp_options *o, const dp_model *m, float *params, float *buffers, int64_t *counters)
{
    return dp_trainer_load_model_part(o, m, (dp_range){0, dp_params_floats(&m->params)}, params, buffers, counters);
}

/* Sharded start-up (ZeRO-3): every rank draws its shard of the initial parameters alone, bit
 * for bit the unsharded draw's, or reads that shard's parts of --init (rank 0 first, checking
 * the file), and the buffers; no rank holds the model. */
static int own_shard(trainer *t)
{
    const dp_model *m = dp_engine_model(t->engine);
    dp_range mine = dp_engine_state(t->engine, DP_STATE_PARAMETERS).held;
    float *params = t->host.state[DP_STATE_PARAMETERS], *statistics = t->host.state[DP_STATE_STATISTICS];
    int from_file = t->o->init_path[0] != 0, ready = 1, status = 0;
    if (from_file && t->comm->rank == 0)
        status = dp_trainer_load_model_part(t->o, m, mine, params, statistics, m->counters);
    if (!status && from_file) /* rank 0 has checked the file: the others read their parts */
        status = dp_comm_broadcast(t->comm, &ready, sizeof ready, 0);
    if (!status && (!from_file || t->comm->rank != 0))
        status = dp_trainer_load_model_part(t->o, m, mine, params, statistics, m->counters);
    if (status)
        return status;
    dp_engine_upload_held(t->engine, DP_STATE_PARAMETERS, params);
    dp_engine_upload_held(t->engine, DP_STATE_STATISTICS, statistics);
    return 0;
}

/* Rank 0's initial model (drawn or --init) to every rank, or ZeRO-3's shards drawn or read by their ranks. */
static int fresh_start(trainer *t)
{
    if (params_sharded(t))
        return own_shard(t);
    const dp_model *m = dp_engine_model(t->engine);
    int status = t->comm->rank == 0 ? dp_trainer_load_model(t->o, m, t->host.state[DP_STATE_PARAMETERS],
                                                            t->host.state[DP_STATE_STATISTICS], m->counters)
                                    : 0;
    return status ? status : share_state(t, DP_STATE_PARAMETERS, DP_STATE_OPTIMIZER);
}

int dp_trainer_start_state(trainer *t)
{
    char found[DP_PATH_MAX + 64] = "";
    const char *spec = t->o->resume;
    int status = 0;
    if (dp_options_resume_auto(t->o)) {
        status = find_auto_checkpoint(t, found, sizeof found);
        spec = found;
    }
    if (!status)
        status = spec[0] ? resume(t, spec) : fresh_start(t);
    return status ? status : dp_trainer_claim_checkpoint_dir(t);
}

/* The model alone, as PyTorch's model.state_dict() holds it. */
static int save_model(trainer *t)
{
    char steps[32], seed[32], structure[DP_META_VALUE_MAX];
    const dp_model *m = dp_engine_model(t->engine);
    snprintf(steps, sizeof steps, "%ld", dp_engine_steps_done(t->engine));
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->o->seed);
    dp_model_spec_canonical(&t->o->model, m->inputs, 1, structure, sizeof structure);
    const dp_model_spec *spec = &t->o->model;
    const char *keys[] = {"format", "dptrain_version", spec->from_layers ? "layers" : "model", "structure", "steps", "seed"};
    const char *values[] = {"pt", PACKAGE_VERSION, spec->text, structure, steps, seed};
    dp_tensor_ref *refs = dp_calloc((size_t)tensor_capacity(t), sizeof *refs, "the --save tensor list");
    if (!refs)
        return DP_ENOMEM;
    int count = model_tensors(t, refs), meta = (int)(sizeof keys / sizeof *keys), status;
    if (params_sharded(t)) {
        for (int i = 0; i < m->params.count; i++) /* asked of dp_trainer_gather_parameter_piece */
            refs[i].data = NULL;
        status = dp_safetensors_write_streamed(t->o->save_path, refs, count, keys, values, meta,
                                               dp_trainer_gather_parameter_piece, t, dp_trainer_save_piece(t));
    } else {
        status = dp_safetensors_write(t->o->save_path, refs, count, keys, values, meta);
    }
    free(refs);
    return status;
}

int dp_trainer_export(trainer *t, float **params_out)
{
    int status = 0;
    if (params_out) { /* every rank's whole parameters (the tests compare ranks) */
        *params_out = dp_alloc(t->plan.nparams * sizeof(float), "the final parameters");
        if (!*params_out)
            return DP_ENOMEM;
        status = dp_engine_gather_state(t->engine, DP_STATE_PARAMETERS, *params_out, -1);
    }
    if (status || !t->o->save_path[0])
        return status;
    if (params_sharded(t)) { /* streamed: the statistics alone first */
        if (!(status = collect_state(t, DP_STATE_STATISTICS, DP_STATE_OPTIMIZER, 0)) && t->comm->rank == 0)
            return save_model(t);
        return status ? status : dp_trainer_send_parameter_pieces(t);
    }
    status = collect_state(t, DP_STATE_PARAMETERS, DP_STATE_OPTIMIZER, 0);
    return status || t->comm->rank != 0 ? status : save_model(t);
}
