#include "dp/checkpoint.h"

#include "dp/error.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define NAME_FORMAT "step-%09ld.safetensors"
#define MAX_FILES 4096
#define MAX_META 64

/* CRC-32 of the tensors' bytes in order: the file's data section, as written. */
static unsigned long tensors_crc32(const dp_tensor_ref *tensors, int count)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < count; i++) {
        const unsigned char *bytes = (const unsigned char *)tensors[i].data;
        size_t left = (size_t)dp_tensor_numel(&tensors[i]) * sizeof(float);
        /* zlib takes uInt lengths: feed large tensors in pieces. */
        for (; left; ) {
            uInt piece = left > (1u << 30) ? (1u << 30) : (uInt)left;
            crc = crc32(crc, bytes, piece);
            bytes += piece;
            left -= piece;
        }
    }
    return crc;
}

static int ensure_directory(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : dp_fail(DP_EIO, "--checkpoint-dir %s: not a directory", dir);
    if (mkdir(dir, 0777) != 0)
        return dp_fail(DP_EIO, "--checkpoint-dir %s: cannot create: %s", dir, strerror(errno));
    return 0;
}

/* Steps of the step-*.safetensors files in dir, newest first; *count of them. */
static int list_steps(const char *dir, long *steps, int *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return dp_fail(DP_EIO, "%s: cannot open checkpoint directory: %s", dir, strerror(errno));
    *count = 0;
    struct dirent *entry;
    while ((entry = readdir(d)) && *count < MAX_FILES) {
        long step;
        char tail[32];
        /* The exact name only: temporaries (".tmp.PID") and other files are not checkpoints. */
        if (sscanf(entry->d_name, "step-%ld.safetensor%31s", &step, tail) == 2 &&
            strcmp(tail, "s") == 0)
            steps[(*count)++] = step;
    }
    closedir(d);
    for (int i = 1; i < *count; i++) /* insertion sort, newest first */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            long tmp = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = tmp;
        }
    return 0;
}

static void checkpoint_path(const char *dir, long step, char *path, size_t size)
{
    char name[64];
    snprintf(name, sizeof name, NAME_FORMAT, step);
    snprintf(path, size, "%s/%s", dir, name);
}

static int prune_old(const char *dir, int keep)
{
    static long steps[MAX_FILES];
    int count = 0, status = list_steps(dir, steps, &count);
    for (int i = keep; !status && i < count; i++) {
        char path[4096];
        checkpoint_path(dir, steps[i], path, sizeof path);
        if (unlink(path) != 0)
            status = dp_fail(DP_EIO, "%s: cannot delete old checkpoint: %s", path, strerror(errno));
    }
    return status;
}

int dp_checkpoint_save(const char *dir, long step, const dp_tensor_ref *tensors, int count,
                       const char *const *keys, const char *const *values, int meta_count,
                       int keep)
{
    if (meta_count + 1 > MAX_META)
        return dp_fail(DP_EINVAL, "checkpoint: at most %d metadata entries", MAX_META - 1);
    int status = ensure_directory(dir);
    if (status)
        return status;
    const char *all_keys[MAX_META], *all_values[MAX_META];
    char checksum[32];
    snprintf(checksum, sizeof checksum, "crc32:%08lx", tensors_crc32(tensors, count));
    for (int i = 0; i < meta_count; i++) {
        all_keys[i] = keys[i];
        all_values[i] = values[i];
    }
    all_keys[meta_count] = "checksum";
    all_values[meta_count] = checksum;
    char path[4096];
    checkpoint_path(dir, step, path, sizeof path);
    status = dp_safetensors_write(path, tensors, count, all_keys, all_values, meta_count + 1);
    return status ? status : prune_old(dir, keep);
}

int dp_checkpoint_find(const char *spec, char *path, size_t size)
{
    struct stat st;
    if (stat(spec, &st) != 0)
        return dp_fail(DP_EIO, "--resume %s: %s", spec, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        snprintf(path, size, "%s", spec);
        return 0;
    }
    static long steps[MAX_FILES];
    int count = 0, status = list_steps(spec, steps, &count);
    if (status)
        return status;
    if (count == 0)
        return dp_fail(DP_EIO, "--resume %s: no step-*.safetensors checkpoint in this directory", spec);
    checkpoint_path(spec, steps[0], path, size);
    return 0;
}

int dp_checkpoint_load(const char *path, dp_tensor_ref *tensors, int count, dp_meta *meta,
                       int meta_count)
{
    if (meta_count + 1 > MAX_META)
        return dp_fail(DP_EINVAL, "checkpoint: at most %d metadata entries", MAX_META - 1);
    dp_meta all[MAX_META];
    for (int i = 0; i < meta_count; i++)
        all[i] = meta[i];
    snprintf(all[meta_count].key, sizeof all[meta_count].key, "checksum");
    int status = dp_safetensors_read_with_metadata(path, tensors, count, all, meta_count + 1);
    if (status)
        return status;
    char expected[32];
    snprintf(expected, sizeof expected, "crc32:%08lx", tensors_crc32(tensors, count));
    if (strcmp(all[meta_count].value, expected) != 0)
        return dp_fail(DP_EFORMAT, "%s: checksum mismatch (file says '%s', data gives '%s'): the checkpoint is corrupt",
                       path, all[meta_count].value[0] ? all[meta_count].value : "nothing", expected);
    for (int i = 0; i < meta_count; i++)
        meta[i] = all[i];
    return 0;
}
