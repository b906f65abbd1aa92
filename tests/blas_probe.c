/* Asks the BLAS, at run time, whether a Linear's products keep an element's bits when they are
 * cut into blocks, as ZeRO under a budget smaller than a layer cuts them: the weight's rows (the
 * output's columns) in forward, the weight gradient's rows, and the weight's columns for the
 * input gradient. OpenBLAS's SkylakeX and Cooperlake kernels keep them at small shapes, its
 * Haswell and Zen kernels do not: a test promises bitwise only where this says yes. */
#include "tests/blas_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The forms of linear.c's cut GEMMs. */
enum { FORWARD, WEIGHT_GRAD, INPUT_GRAD, FORMS };
static const char *const form_names[FORMS] = {"forward x W^T", "weight gradient dY^T x", "input gradient dY W"};

static void fill(float *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 9) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* The whole product of `form` into c: rows x in -> out. */
static void whole(const dp_backend *be, int form, int rows, int in, int out, const float *x, const float *w,
                  const float *dy, float *c)
{
    if (form == FORWARD)
        be->gemm(be, 0, 1, rows, out, in, 1.0f, x, in, w, in, 0.0f, c, out);
    else if (form == WEIGHT_GRAD)
        be->gemm(be, 1, 0, out, in, rows, 1.0f, dy, out, x, in, 0.0f, c, in);
    else
        be->gemm(be, 0, 0, rows, in, out, 1.0f, dy, out, w, in, 0.0f, c, in);
}

/* Block [first, end) of the product of `form` into c, as linear.c computes it (the input
 * gradient's block of W's columns copied out whole, as a gather delivers it). */
static void block(const dp_backend *be, int form, int rows, int in, int out, const float *x, const float *w,
                  const float *dy, float *columns, size_t first, size_t end, float *c)
{
    int n = (int)(end - first);
    if (form == FORWARD) {
        be->gemm(be, 0, 1, rows, n, in, 1.0f, x, in, w + first * in, in, 0.0f, c + first, out);
    } else if (form == WEIGHT_GRAD) {
        be->gemm(be, 1, 0, n, in, rows, 1.0f, dy + first, out, x, in, 0.0f, c + first * in, in);
    } else {
        for (int o = 0; o < out; o++)
            memcpy(columns + (size_t)o * n, w + (size_t)o * in + first, (size_t)n * sizeof(float));
        be->gemm(be, 0, 0, rows, n, out, 1.0f, dy, out, columns, n, 0.0f, c + first, in);
    }
}

int dp_blas_probe_cuts(const dp_backend *be, int rows, int in, int out, char *why, size_t size)
{
    size_t big = (size_t)(rows > out ? rows : out) * (size_t)(in > out ? in : out);
    float *x = malloc((size_t)rows * in * sizeof(float)), *w = malloc((size_t)out * in * sizeof(float));
    float *dy = malloc((size_t)rows * out * sizeof(float)), *columns = malloc((size_t)out * in * sizeof(float));
    float *ref = malloc(big * sizeof(float)), *cut = malloc(big * sizeof(float));
    int keeps = x && w && dy && columns && ref && cut;
    if (!keeps)
        snprintf(why, size, "out of memory");
    fill(x, keeps ? (size_t)rows * in : 0, 1);
    fill(w, keeps ? (size_t)out * in : 0, 2);
    fill(dy, keeps ? (size_t)rows * out : 0, 3);
    for (int form = 0; keeps && form < FORMS; form++) {
        whole(be, form, rows, in, out, x, w, dy, ref);
        /* The dimension the blocks cut: W's rows, or its columns for the input gradient. */
        size_t length = (size_t)(form == INPUT_GRAD ? in : out);
        size_t elements = form == FORWARD ? (size_t)rows * out : form == WEIGHT_GRAD ? (size_t)out * in
                                                                                     : (size_t)rows * in;
        for (size_t per = 1; keeps && per < length; per++)
            for (int from_end = 0; keeps && from_end < 2; from_end++) {
                memset(cut, 0, elements * sizeof(float));
                /* Blocks of `per`, the short one first (from the end, as ZeRO's units) or last. */
                size_t short_block = length % per;
                for (size_t first = 0, end; first < length; first = end) {
                    end = from_end && first == 0 && short_block ? short_block : first + per;
                    end = end < length ? end : length;
                    block(be, form, rows, in, out, x, w, dy, columns, first, end, cut);
                }
                if (memcmp(cut, ref, elements * sizeof(float)) != 0) {
                    keeps = 0;
                    snprintf(why, size, "the %s of %d rows, %d -> %d, in blocks of %zu%s differs from the whole product",
                             form_names[form], rows, in, out, per, from_end ? " counted from the end" : "");
                }
            }
    }
    if (keeps)
        snprintf(why, size, "every block of a %d-row %d -> %d Linear's products keeps its bits", rows, in, out);
    free(x);
    free(w);
    free(dy);
    free(columns);
    free(ref);
    free(cut);
    return keeps;
}
