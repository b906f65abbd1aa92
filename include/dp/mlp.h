/* A multi-layer perceptron: Linear layers with ReLU between them. All parameters live in ONE
 * flat buffer and all gradients in another with the same layout (layer by layer: weight
 * [out, in] row-major, then bias [out], as PyTorch's nn.Linear), so one collective moves
 * every gradient and a bucket or shard is just a slice. */
#ifndef DP_MLP_H
#define DP_MLP_H

#include "dp/backend.h"
#include "dp/tensor.h"

#include <stddef.h>
#include <stdint.h>

#define DP_MLP_MAX_LAYERS 64

typedef enum dp_loss { DP_LOSS_XENT, DP_LOSS_MSE } dp_loss;

/* Called during backward as soon as layer `layer`'s gradients (flat slice [offset,
 * offset + count) of the gradient buffer) are final: the hook for overlapping communication
 * with the rest of backward. Layers arrive last first. */
typedef void (*dp_grad_ready_fn)(void *ctx, int layer, size_t offset, size_t count);

typedef struct dp_mlp {
    const dp_backend *be;
    int nlayers;                       /* Linear layers: widths has nlayers + 1 entries */
    int widths[DP_MLP_MAX_LAYERS + 1];
    size_t offsets[DP_MLP_MAX_LAYERS]; /* where layer i's weight starts; its bias follows */
    size_t nparams;
    int max_rows;                      /* most samples one forward may take */
    float *params, *grads;             /* backend memory, nparams each */
    float *acts[DP_MLP_MAX_LAYERS + 1];/* acts[i + 1]: output of layer i; acts[0] is the input */
    float *delta[2];                   /* ping-pong gradients w.r.t. activations */
    dp_grad_ready_fn grad_ready;       /* may be NULL */
    void *grad_ready_ctx;
} dp_mlp;

/* Parses "784,256,10" into widths (at least 2, each > 0); *count gets the number of widths. */
int dp_mlp_parse_widths(const char *spec, int *widths, int *count);

/* Parameter count of the MLP with these widths. */
size_t dp_mlp_param_count(const int *widths, int nwidths);

int dp_mlp_create(dp_mlp *m, const dp_backend *be, const int *widths, int nwidths, int max_rows);
void dp_mlp_free(dp_mlp *m);

/* PyTorch's nn.Linear default: weights and biases uniform in +-1/sqrt(fan_in), from seed.
 * Fills a host buffer of nparams floats (rank 0 draws, MPI_Bcast shares). */
void dp_mlp_init_uniform(const int *widths, int nwidths, uint64_t seed, float *host_params);

/* Describes the parameters as PyTorch-named tensors over host_params
 * (layers.{i}.weight, layers.{i}.bias); out has room for 2 * nlayers. */
void dp_mlp_tensor_refs(const int *widths, int nwidths, float *host_params, dp_tensor_ref *out);

/* Forward on `rows` samples x [rows, widths[0]] (backend memory); returns the output buffer. */
const float *dp_mlp_forward(dp_mlp *m, const float *x, int rows);

/* Forward, summed loss, and backward ADDING into m->grads (zero them per step yourself).
 * labels for DP_LOSS_XENT, targets [rows, K] for DP_LOSS_MSE. */
void dp_mlp_forward_backward(dp_mlp *m, const float *x, const int32_t *labels,
                             const float *targets, int rows, dp_loss loss,
                             double *loss_sum, long *correct);

/* Forward and summed loss only (evaluation). */
void dp_mlp_evaluate(dp_mlp *m, const float *x, const int32_t *labels, const float *targets,
                     int rows, dp_loss loss, double *loss_sum, long *correct);

#endif
