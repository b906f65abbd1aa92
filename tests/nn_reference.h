/* The double-precision reference forward that the modules' finite-difference tests share
 * (tests/test_model.c, tests/test_conv.c): written from PyTorch's formulas, not from src/nn. */
#ifndef DP_TESTS_NN_REFERENCE_H
#define DP_TESTS_NN_REFERENCE_H

#include "src/nn/module.h"

#include <stddef.h>
#include <stdint.h>

/* A Linear on rows samples of in (its folded ReLU too, when it absorbs the next module). */
void nn_ref_linear(const dp_module *mod, const double *p, const double *in, double *out, int rows);
/* A ReLU on n values (an absorbed one passes them: its Linear applied it). */
void nn_ref_relu(const dp_module *mod, const double *in, double *out, size_t n);
/* The summed softmax cross-entropy of rows x classes logits. */
double nn_ref_xent(const double *logits, const int32_t *labels, int rows, int classes);

#endif
