/* Replays files through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so
 * make check runs every corpus file (seeds and crash regressions) in every build.
 * Usage: replay_TARGET DIR... ; exits non-zero if a directory holds no files. */
#include "tests/fuzz/fuzz_input.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the whole file at path into a new buffer; NULL if it cannot be read. */
static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        rewind(f);
        data = end >= 0 ? malloc((size_t)end + 1) : NULL;
        *len = data ? fread(data, 1, (size_t)end, f) : 0;
        if (data && *len != (size_t)end) {
            free(data);
            data = NULL;
        }
    }
    fclose(f);
    return data;
}

/* Runs every regular entry of dir; returns how many, or -1 if one cannot be read. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return -1;
    }
    int count = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        uint8_t *data = read_file(path, &len);
        if (!data) {
            fprintf(stderr, "%s: cannot read\n", path);
            count = -1;
            break;
        }
        LLVMFuzzerTestOneInput(data, len);
        free(data);
        count++;
    }
    closedir(d);
    return count;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int count = replay_dir(argv[i]);
        if (count <= 0) {
            fprintf(stderr, "%s: no corpus files replayed\n", argv[i]);
            return 1;
        }
        printf("%s: %d files replayed\n", argv[i], count);
    }
    return argc > 1 ? 0 : 1;
}
