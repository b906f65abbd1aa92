/* Writes a float32 .npy [ROWS, COLS] of values uniform in [-1, 1] from SEED: inputs for the
 * --predict tests and the mapped reader's memory test; COLS written CxHxW gives images [ROWS, C,
 * H, W]. With --labels, int32 [ROWS] classes uniform in [0, COLS) instead.
 * Usage: npy_fixture [--labels] PATH ROWS COLS SEED */
#include "dp/data.h"
#include "dp/error.h"
#include "dp/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int labels = argc == 6 && strcmp(argv[1], "--labels") == 0;
    if (argc != 5 && !labels) {
        fprintf(stderr, "usage: npy_fixture [--labels] PATH ROWS COLS SEED\n");
        return 2;
    }
    argv += labels;
    size_t rows = strtoul(argv[2], NULL, 10), image[3] = {0, 0, 0};
    int is_image = sscanf(argv[3], "%zux%zux%zu", &image[0], &image[1], &image[2]) == 3;
    size_t cols = is_image ? image[0] * image[1] * image[2] : strtoul(argv[3], NULL, 10);
    dp_rng rng;
    dp_rng_seed(&rng, strtoull(argv[4], NULL, 10));
    size_t count = labels ? rows : rows * cols;
    void *values = malloc(count * 4 + 1); /* float32 or int32: 4 bytes a value */
    float *features = values;
    int32_t *classes = values;
    for (size_t i = 0; values && i < count; i++) {
        if (labels)
            classes[i] = (int32_t)dp_rng_below(&rng, cols);
        else
            features[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    }
    dp_npy array = {.dtype = DP_NPY_F32, .ndim = 2, .shape = {rows, cols}, .data = values};
    if (is_image)
        array = (dp_npy){.dtype = DP_NPY_F32, .ndim = 4, .shape = {rows, image[0], image[1], image[2]}, .data = values};
    if (labels)
        array = (dp_npy){.dtype = DP_NPY_I32, .ndim = 1, .shape = {rows}, .data = values};
    int status = values ? dp_npy_write(argv[1], &array) : DP_ENOMEM;
    if (status)
        fprintf(stderr, "npy_fixture: %s\n", dp_last_error());
    free(values);
    return status ? 1 : 0;
}
