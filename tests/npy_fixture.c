/* Writes a float32 .npy [ROWS, COLS] of values uniform in [-1, 1] from SEED: inputs for the
 * --predict tests. Usage: npy_fixture PATH ROWS COLS SEED */
#include "dp/data.h"
#include "dp/error.h"
#include "dp/rng.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: npy_fixture PATH ROWS COLS SEED\n");
        return 2;
    }
    size_t rows = strtoul(argv[2], NULL, 10), cols = strtoul(argv[3], NULL, 10);
    dp_rng rng;
    dp_rng_seed(&rng, strtoull(argv[4], NULL, 10));
    float *values = malloc(rows * cols * sizeof *values + 1);
    for (size_t i = 0; values && i < rows * cols; i++)
        values[i] = 2.0f * dp_rng_uniform(&rng) - 1.0f;
    dp_npy array = {.dtype = DP_NPY_F32, .ndim = 2, .shape = {rows, cols}, .data = values};
    int status = values ? dp_npy_write(argv[1], &array) : DP_ENOMEM;
    if (status)
        fprintf(stderr, "npy_fixture: %s\n", dp_last_error());
    free(values);
    return status ? 1 : 0;
}
