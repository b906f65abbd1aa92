#include "dp/checkpoint.h"

#include "dp/atomic_file.h"
#include "dp/error.h"
#include "dp/input_file.h"
#include "dp/rng.h"

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_PREFIX "step-"
#define NAME_SUFFIX ".safetensors"
#define NAME_FORMAT NAME_PREFIX "%09ld" NAME_SUFFIX
#define STEP_DIGITS_MAX 18
#define MAX_META 64
/* The checksum of checkpoints written before it covered the whole file: the data only. */
#define DATA_ONLY_CRC_PREFIX "crc32:"

/* --- names and numbers --- */

/* A whole number written as digits only (no sign, space or suffix), at most 18 of them. */
static int parse_count(const char *text, size_t len, long *value)
{
    if (len == 0 || len > STEP_DIGITS_MAX)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return -1;
        v = v * 10 + (text[i] - '0');
    }
    *value = v;
    return 0;
}

/* The step of a file named step-<digits>.safetensors (zero-padded or not), or -1. */
static long step_of_name(const char *name)
{
    size_t len = strlen(name), prefix = strlen(NAME_PREFIX), suffix = strlen(NAME_SUFFIX);
    long step;
    if (len <= prefix + suffix || strncmp(name, NAME_PREFIX, prefix) != 0 ||
        strcmp(name + len - suffix, NAME_SUFFIX) != 0 ||
        parse_count(name + prefix, len - prefix - suffix, &step) != 0)
        return -1;
    return step;
}

/* The step of a shard file step-<digits>.rank-R-of-W.safetensors, or -1. */
static long step_of_shard_name(const char *name)
{
    size_t prefix = strlen(NAME_PREFIX);
    if (strncmp(name, NAME_PREFIX, prefix) != 0)
        return -1;
    size_t digits = strspn(name + prefix, "0123456789");
    long step;
    int rank, world, consumed = 0;
    if (parse_count(name + prefix, digits, &step) != 0 ||
        sscanf(name + prefix + digits, ".rank-%d-of-%d" NAME_SUFFIX "%n", &rank, &world, &consumed) != 2 ||
        name[prefix + digits + (size_t)consumed] != '\0' || rank < 0 || world < 1 || rank >= world)
        return -1;
    return step;
}

static int is_checkpoint_name(const char *name, const void *unused)
{
    (void)unused;
    return step_of_name(name) >= 0 || step_of_shard_name(name) >= 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int dp_checkpoint_dir_owns(const char *path)
{
    const char *name = base_name(path);
    size_t target = dp_temporary_target_length(name);
    char stem[NAME_MAX + 1];
    if (target > 0 && target < sizeof stem) {
        memcpy(stem, name, target);
        stem[target] = '\0';
        name = stem;
    }
    return is_checkpoint_name(name, NULL);
}

static int join(const char *dir, const char *name, char *path, size_t size)
{
    if (snprintf(path, size, "%s/%s", dir, name) >= (int)size)
        return dp_fail(DP_EINVAL, "%s/%s: path too long", dir, name);
    return 0;
}

static int is_run_id(const char *text)
{
    return strlen(text) == DP_CHECKPOINT_RUN_ID_LEN &&
           strspn(text, "0123456789abcdef") == DP_CHECKPOINT_RUN_ID_LEN;
}

void dp_checkpoint_new_run_id(char out[DP_CHECKPOINT_RUN_ID_LEN + 1])
{
    uint64_t bits = 0;
    if (getrandom(&bits, sizeof bits, 0) != (ssize_t)sizeof bits) {
        /* No entropy source: the clock and the process still make a collision unlikely. */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        bits = dp_rng_mix((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec,
                          (uint64_t)getpid());
    }
    snprintf(out, DP_CHECKPOINT_RUN_ID_LEN + 1, "%016llx", (unsigned long long)bits);
}

/* --- the directory's checkpoints --- */

typedef struct entry {
    long step;
    char *name;
} entry;

typedef struct listing {
    entry *entries;
    size_t count, capacity;
} listing;

static void free_listing(listing *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->entries[i].name);
    free(l->entries);
    memset(l, 0, sizeof *l);
}

static int add_entry(listing *l, long step, const char *name)
{
    if (l->count == l->capacity) {
        size_t capacity = l->capacity ? 2 * l->capacity : 64;
        entry *bigger = realloc(l->entries, capacity * sizeof *bigger);
        if (!bigger)
            return dp_fail(DP_ENOMEM, "out of memory listing checkpoints");
        l->entries = bigger;
        l->capacity = capacity;
    }
    char *copy = strdup(name);
    if (!copy)
        return dp_fail(DP_ENOMEM, "out of memory listing checkpoints");
    l->entries[l->count++] = (entry){step, copy};
    return 0;
}

/* Newest first; at equal steps the zero-padded name first, so the choice never depends on
 * the order readdir happens to return. */
static int newest_first(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step > y->step ? -1 : 1;
    char canonical[64];
    snprintf(canonical, sizeof canonical, NAME_FORMAT, x->step);
    int x_canonical = strcmp(x->name, canonical) == 0, y_canonical = strcmp(y->name, canonical) == 0;
    if (x_canonical != y_canonical)
        return x_canonical ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Every step-<digits>.safetensors entry of dir, however many, newest first. */
static int list_checkpoints(const char *dir, listing *l)
{
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    if (!d)
        return dp_fail(DP_EIO, "%s: cannot open checkpoint directory: %s", dir, strerror(errno));
    int status = 0;
    errno = 0;
    for (struct dirent *e; !status && (e = readdir(d)) != NULL; errno = 0) {
        long step = step_of_name(e->d_name);
        if (step >= 0)
            status = add_entry(l, step, e->d_name);
    }
    if (!status && errno)
        status = dp_fail(DP_EIO, "%s: cannot read checkpoint directory: %s", dir, strerror(errno));
    closedir(d);
    if (status)
        free_listing(l);
    else if (l->count)
        qsort(l->entries, l->count, sizeof *l->entries, newest_first);
    return status;
}

/* The run_id in path's metadata; fails (with the reader's message) for an unreadable file. */
static int read_run_id(const char *path, char run_id[DP_META_VALUE_MAX])
{
    dp_meta meta = {.key = DP_CHECKPOINT_RUN_ID_KEY};
    int status = dp_safetensors_read_with_metadata(path, NULL, 0, &meta, 1);
    if (!status)
        memcpy(run_id, meta.value, sizeof meta.value);
    return status;
}

static int belongs_to(const char *path, const char *run_id)
{
    char found[DP_META_VALUE_MAX];
    return read_run_id(path, found) == 0 && strcmp(found, run_id) == 0;
}

static int ensure_directory(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0
                                   : dp_fail(DP_EIO, "--checkpoint-dir %s: is %s, not a directory",
                                             dir, dp_file_kind(st.st_mode));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return dp_fail(DP_EIO, "--checkpoint-dir %s: cannot create: %s", dir, strerror(errno));
    return 0;
}

/* --- writing --- */

static const char *value_of(const char *key, const char *const *keys, const char *const *values,
                            int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(keys[i], key) == 0)
            return values[i];
    return NULL;
}

/* Calls visit on every entry of dir under a shard's name of `step` (-1: any step), until one
 * fails. */
static int for_each_shard(const char *dir, long step, int (*visit)(const char *dir, const char *name, const char *path))
{
    DIR *d = opendir(dir);
    if (!d)
        return dp_fail(DP_EIO, "%s: cannot open checkpoint directory: %s", dir, strerror(errno));
    int status = 0;
    for (struct dirent *e; !status && (e = readdir(d)) != NULL;) {
        char path[4096];
        long found = step_of_shard_name(e->d_name);
        if (found < 0 || (step >= 0 && found != step) || (status = join(dir, e->d_name, path, sizeof path)))
            continue;
        status = visit(dir, e->d_name, path);
    }
    closedir(d);
    return status;
}

static int delete_shard(const char *dir, const char *name, const char *path)
{
    (void)dir, (void)name;
    return unlink(path) == 0 ? 0 : dp_fail(DP_EIO, "%s: cannot delete old checkpoint shard: %s", path, strerror(errno));
}

/* Deletes the shard files of step's checkpoint (written with --checkpoint-shards). */
static int delete_shards(const char *dir, long step)
{
    return for_each_shard(dir, step, delete_shard);
}

/* Whether `step` is one of the list's ("S=V,S=V", DP_CHECKPOINT_BEST_KEY's; NULL: none). */
static int listed(const char *list, long step)
{
    for (const char *p = list; p && *p;) {
        char *end;
        long listed_step = strtol(p, &end, 10);
        if (end != p && listed_step == step)
            return 1;
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return 0;
}

/* Deletes this run's checkpoints at or below `step` beyond the newest keep, shards included,
 * except the steps `best` lists. */
static int prune_old(const char *dir, const char *run_id, long step, long keep, const char *best)
{
    listing l;
    int status = list_checkpoints(dir, &l);
    long kept = 0;
    for (size_t i = 0; !status && i < l.count; i++) {
        char path[4096];
        if (l.entries[i].step > step)
            continue;
        status = join(dir, l.entries[i].name, path, sizeof path);
        if (status || !belongs_to(path, run_id) || ++kept <= keep || listed(best, l.entries[i].step))
            continue;
        if (unlink(path) != 0)
            status = dp_fail(DP_EIO, "%s: cannot delete old checkpoint: %s", path, strerror(errno));
        if (!status)
            status = delete_shards(dir, l.entries[i].step);
    }
    free_listing(&l);
    return status;
}

/* A file of this step from another run stays: two runs in one directory must not overwrite
 * each other. One that is no readable checkpoint (a copy cut short) is replaced, as the claim
 * warned: no resume reads it, and refusing it would stop the run that passed over it. */
static int refuse_foreign_file(const char *path, const char *run_id)
{
    char found[DP_META_VALUE_MAX];
    if (read_run_id(path, found) != 0 || strcmp(found, run_id) == 0)
        return 0;
    return dp_fail(DP_EIO, "--checkpoint-dir: %s already exists and is a checkpoint of another "
                   "run (run_id %s; this run is %s): refusing to overwrite it", path, found, run_id);
}

int dp_checkpoint_save(const char *dir, long step, const dp_tensor_ref *tensors, int count,
                       const char *const *keys, const char *const *values, int meta_count,
                       long keep)
{
    if (meta_count < 0 || meta_count >= MAX_META)
        return dp_fail(DP_EINVAL, "checkpoint: at most %d metadata entries", MAX_META - 1);
    const char *run_id = value_of(DP_CHECKPOINT_RUN_ID_KEY, keys, values, meta_count);
    const char *step_text = value_of(DP_CHECKPOINT_STEP_KEY, keys, values, meta_count);
    long stated = -1;
    if (!run_id || !is_run_id(run_id) || !step_text ||
        parse_count(step_text, strlen(step_text), &stated) || stated != step)
        return dp_fail(DP_EINVAL, "checkpoint of step %ld: the metadata must hold '%s' (16 hex "
                       "digits) and '%s' equal to the step", step, DP_CHECKPOINT_RUN_ID_KEY,
                       DP_CHECKPOINT_STEP_KEY);
    char path[4096], name[64];
    snprintf(name, sizeof name, NAME_FORMAT, step);
    int status = ensure_directory(dir);
    if (!status)
        status = join(dir, name, path, sizeof path);
    if (!status)
        status = refuse_foreign_file(path, run_id);
    if (!status)
        status = dp_safetensors_write_with_crc(path, tensors, count, keys, values, meta_count,
                                               DP_CHECKPOINT_CHECKSUM_KEY);
    if (!status && dp_remove_stale_temporaries(dir, is_checkpoint_name, NULL) < 0)
        status = DP_EIO;
    return status ? status
                  : prune_old(dir, run_id, step, keep, value_of(DP_CHECKPOINT_BEST_KEY, keys, values, meta_count));
}

int dp_checkpoint_shard_name(long step, int rank, int world, char *name, size_t size)
{
    if (snprintf(name, size, NAME_PREFIX "%09ld.rank-%d-of-%d" NAME_SUFFIX, step, rank, world) >= (int)size)
        return dp_fail(DP_EINVAL, "checkpoint shard name of step %ld, rank %d of %d: too long", step, rank, world);
    return 0;
}

int dp_checkpoint_save_shard(const char *dir, long step, int rank, int world, const dp_tensor_ref *tensors,
                             int count, const char *const *keys, const char *const *values, int meta_count)
{
    const char *run_id = value_of(DP_CHECKPOINT_RUN_ID_KEY, keys, values, meta_count);
    char path[4096], name[128];
    if (!run_id || !is_run_id(run_id))
        return dp_fail(DP_EINVAL, "checkpoint shard of step %ld: the metadata must hold '%s'", step,
                       DP_CHECKPOINT_RUN_ID_KEY);
    int status = ensure_directory(dir);
    if (!status)
        status = dp_checkpoint_shard_name(step, rank, world, name, sizeof name);
    if (!status)
        status = join(dir, name, path, sizeof path);
    if (!status)
        status = refuse_foreign_file(path, run_id);
    return status ? status : dp_safetensors_write_with_crc(path, tensors, count, keys, values, meta_count,
                                                          DP_CHECKPOINT_CHECKSUM_KEY);
}

/* Shard names are not listed as checkpoints: one that is a directory, a FIFO or a link would
 * fail only when the run reaches its step, after the training before it. */
static int refuse_non_file(const char *dir, const char *name, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 0;
    return dp_fail(DP_EIO, "--checkpoint-dir %s holds %s, %s under a shard's name: a checkpoint of that step "
                   "could not be written (move it away)", dir, name, dp_file_kind(st.st_mode));
}

int dp_checkpoint_claim_dir(const char *dir, const char *run_id, long start_step,
                            long *later_step)
{
    *later_step = -1;
    int status = ensure_directory(dir);
    if (!status)
        status = for_each_shard(dir, -1, refuse_non_file);
    if (!status && dp_remove_stale_temporaries(dir, is_checkpoint_name, NULL) < 0)
        status = dp_fail_context(DP_EIO, "--checkpoint-dir %s", dir);
    listing l = {0};
    if (!status)
        status = list_checkpoints(dir, &l);
    for (size_t i = 0; !status && i < l.count; i++) {
        char path[4096], found[DP_META_VALUE_MAX];
        if ((status = join(dir, l.entries[i].name, path, sizeof path)))
            break;
        if (read_run_id(path, found) != 0) /* as --resume passes it over: replaced when a step writes it */
            fprintf(stderr, "dp_worker: warning: --checkpoint-dir %s holds %s, which is not a readable "
                    "checkpoint (%s): no resume reads it, and it is replaced if training reaches step %ld\n", dir,
                    l.entries[i].name, dp_last_error(), l.entries[i].step);
        else if (strcmp(found, run_id) != 0)
            status = dp_fail(DP_EIO, "--checkpoint-dir %s holds %s of another run (run_id %s; "
                             "this run is %s): continue that run with --resume %s, or use an "
                             "empty directory (its checkpoints would be overwritten or pruned)",
                             dir, l.entries[i].name, found[0] ? found : "none", run_id, dir);
        else if (l.entries[i].step > start_step && l.entries[i].step > *later_step)
            *later_step = l.entries[i].step;
    }
    free_listing(&l);
    return status;
}

/* --- reading --- */

int dp_checkpoint_find(const char *spec, char *path, size_t size, char *skipped, size_t skipped_size)
{
    struct stat st;
    skipped[0] = '\0';
    if (stat(spec, &st) != 0)
        return dp_fail(DP_EIO, "--resume %s: %s", spec, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        snprintf(path, size, "%s", spec);
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return dp_fail(DP_EIO, "--resume %s: is %s, not a checkpoint file or directory", spec,
                       dp_file_kind(st.st_mode));
    /* The same verdict as --resume auto's: the newest complete checkpoint. */
    int status = dp_checkpoint_find_complete(spec, path, size, skipped, skipped_size);
    if (!status && !path[0])
        status = dp_fail(DP_EIO, "--resume %s: no complete step-*.safetensors checkpoint in this directory%s%s%s",
                         spec, skipped[0] ? " (passed over: " : "", skipped, skipped[0] ? ")" : "");
    return status;
}

int dp_checkpoint_shard_path(const char *index_path, int rank, int shards, char *path, size_t size)
{
    static const char suffix[] = ".safetensors";
    size_t len = strlen(index_path), stem = len >= sizeof suffix - 1 ? len - (sizeof suffix - 1) : len;
    if (snprintf(path, size, "%.*s.rank-%d-of-%d%s", (int)stem, index_path, rank, shards, suffix) >= (int)size)
        return dp_fail(DP_EINVAL, "%s: shard path too long", index_path);
    return 0;
}

/* Whether every shard an index names is there and passes its checks (a whole file: 1). */
static int shards_complete(const char *index_path)
{
    dp_meta shards = {.key = DP_CHECKPOINT_SHARDS_KEY};
    if (dp_checkpoint_read_metadata(index_path, &shards, 1) != 0)
        return 0;
    long world = 0;
    if (shards.value[0] && (parse_count(shards.value, strlen(shards.value), &world) != 0 || world < 1 || world > 1 << 20))
        return dp_fail(DP_EFORMAT, "%s: metadata %s '%s' is not a shard count", index_path,
                       DP_CHECKPOINT_SHARDS_KEY, shards.value) == 0;
    for (int rank = 0; rank < world; rank++) {
        char path[4096];
        if (dp_checkpoint_shard_path(index_path, rank, (int)world, path, sizeof path) ||
            dp_checkpoint_read_metadata(path, NULL, 0) != 0)
            return 0;
    }
    return 1;
}

int dp_checkpoint_find_complete(const char *dir, char *path, size_t size, char *skipped, size_t skipped_size)
{
    path[0] = skipped[0] = '\0';
    struct stat st;
    if (stat(dir, &st) != 0 && errno == ENOENT)
        return 0;
    listing l;
    int status = list_checkpoints(dir, &l);
    size_t used = 0;
    for (size_t i = 0; !status && i < l.count; i++) {
        if ((status = join(dir, l.entries[i].name, path, size)))
            break;
        if (shards_complete(path))
            break;
        if (used < skipped_size)
            used += (size_t)snprintf(skipped + used, skipped_size - used, "%s%s (%s)", used ? "; " : "",
                                     l.entries[i].name, dp_last_error());
        path[0] = '\0';
    }
    free_listing(&l);
    return status;
}

static int check_identity(const char *path, const dp_meta *step, const dp_meta *run_id)
{
    long stated;
    if (parse_count(step->value, strlen(step->value), &stated) != 0)
        return dp_fail(DP_EFORMAT, "%s: metadata step '%s' is not a whole number", path,
                       step->value);
    long named = step_of_name(base_name(path));
    if (named >= 0 && named != stated)
        return dp_fail(DP_EFORMAT, "%s: the file name says step %ld but the checkpoint holds step "
                       "%ld: it was renamed or copied over another", path, named, stated);
    if (!is_run_id(run_id->value))
        return dp_fail(DP_EFORMAT, "%s: metadata run_id '%s' is not 16 hex digits", path,
                       run_id->value);
    return 0;
}

int dp_checkpoint_read_metadata(const char *path, dp_meta *meta, int meta_count)
{
    enum { CHECKSUM, STEP, RUN_ID, OWN };
    static const char *const own_keys[OWN] = {DP_CHECKPOINT_CHECKSUM_KEY, DP_CHECKPOINT_STEP_KEY,
                                              DP_CHECKPOINT_RUN_ID_KEY};
    if (meta_count < 0 || meta_count + OWN > MAX_META)
        return dp_fail(DP_EINVAL, "checkpoint: at most %d metadata entries", MAX_META - OWN);
    dp_meta all[MAX_META];
    for (int i = 0; i < OWN; i++)
        snprintf(all[i].key, sizeof all[i].key, "%s", own_keys[i]);
    for (int i = 0; i < meta_count; i++)
        all[OWN + i] = meta[i];
    int status = dp_safetensors_read_with_metadata(path, NULL, 0, all, OWN + meta_count);
    if (status)
        return status;
    if (!all[CHECKSUM].value[0])
        return dp_fail(DP_EFORMAT, "%s: not a dptrain checkpoint (no checksum and training "
                       "state: a --save file or a PyTorch file?); start from its weights with "
                       "--init %s", path, path);
    if (strncmp(all[CHECKSUM].value, DATA_ONLY_CRC_PREFIX, strlen(DATA_ONLY_CRC_PREFIX)) == 0)
        return dp_fail(DP_EFORMAT, "%s: written by an older dptrain whose checksum covers only "
                       "the tensor data, so its metadata cannot be verified; start from its "
                       "weights with --init %s", path, path);
    status = dp_safetensors_verify_crc(path, DP_CHECKPOINT_CHECKSUM_KEY);
    if (!status)
        status = check_identity(path, &all[STEP], &all[RUN_ID]);
    for (int i = 0; !status && i < meta_count; i++)
        meta[i] = all[OWN + i];
    return status;
}

int dp_checkpoint_load(const char *path, dp_tensor_ref *tensors, int count, dp_meta *meta,
                       int meta_count)
{
    int status = dp_checkpoint_read_metadata(path, meta, meta_count);
    return status ? status : dp_safetensors_read(path, tensors, count);
}
