/* Which passes a model's layers take into their GEMMs where the backend runs them: the fused
 * epilogues, and at --precision bf16 which Linears write their output in bf16 for the next
 * Linear's GEMMs ("bf16 activations where safe"), and which receive their output gradient so.
 * Planned for the model's backend, or for --memory-plan as a GPU with every cuBLASLt epilogue
 * and bf16 outputs would plan it. */
#include "src/nn/module.h"

/* What the backend runs: each fused epilogue, and gemm_rounded_bf16. */
typedef struct layer_caps {
    int fuses[DP_EPILOGUES];
    int writes_bf16;
} layer_caps;

static layer_caps caps_of(const dp_backend *be)
{
    char why[256];
    /* the reader's copies and the writer's are the held ones: gemm_rounded's */
    layer_caps caps = {.writes_bf16 = be->gemm_rounded && be->gemm_rounded_bf16 &&
                                      be->supports(be, "gemm_rounded", DP_DTYPE_BF16, why, sizeof why) &&
                                      be->supports(be, "gemm_rounded_bf16", DP_DTYPE_BF16, why, sizeof why)};
    for (int kind = 0; kind < DP_EPILOGUES; kind++)
        caps.fuses[kind] = be->gemm_fused && be->supports(be, dp_epilogue_ops[kind], DP_DTYPE_F32, why, sizeof why);
    return caps;
}

/* Its bias and absorbed ReLU in the forward GEMM, its bias gradient in the weight-gradient GEMM,
 * and the ReLU's backward in the input-gradient GEMM of a layer right after that ReLU (the layer
 * before the ReLU then keeps the ReLU's mask). A layer reading its parameters in pieces fuses nothing. */
static void plan_fusion(dp_model *m, const layer_caps *caps)
{
    for (int i = 0; i < m->count; i++) {
        dp_module *mod = &m->modules[i];
        mod->fused = 0;
        mod->drelu_of = NULL;
        if (!mod->type->fuses || dp_module_fetches(mod))
            continue;
        if (mod->absorbs_next ? caps->fuses[DP_EPILOGUE_RELU] : mod->options.bias && caps->fuses[DP_EPILOGUE_BIAS])
            mod->fused |= DP_FUSE_FORWARD;
        if (mod->options.bias && caps->fuses[DP_EPILOGUE_BIAS_GRAD])
            mod->fused |= DP_FUSE_BIAS_GRAD;
        dp_module *before = i >= 2 && m->modules[i - 1].absorbed ? &m->modules[i - 2] : NULL;
        if (before && (before->fused & DP_FUSE_FORWARD) && caps->fuses[DP_EPILOGUE_RELU_MASK] &&
            caps->fuses[DP_EPILOGUE_DRELU]) {
            before->fused |= DP_FUSE_MASK;
            mod->drelu_of = before;
        }
    }
}

/* Whether layer i's output may be bf16: only the next Linear's GEMMs read it (directly or through
 * the ReLU it absorbs; not through Dropout or BatchNorm, whose kernels read FP32, and not the
 * last layer's logits, which the FP32 loss reads), and nothing else reads it as FP32: its bias
 * and ReLU are the GEMM's epilogue, and the ReLU's backward is the next GEMM's DRELU from the
 * mask, not a pass over the output. */
static int bf16_output_safe(const dp_model *m, int i)
{
    const dp_module *mod = &m->modules[i], *next = i + 1 + mod->absorbs_next < m->count
                                                       ? &m->modules[i + 1 + mod->absorbs_next]
                                                       : NULL;
    return mod->type == &dp_module_linear && next && next->type == &dp_module_linear && !dp_module_fetches(mod) &&
           !dp_module_fetches(next) && ((mod->fused & DP_FUSE_FORWARD) || !(mod->options.bias || mod->absorbs_next)) &&
           (!mod->absorbs_next || (mod->fused & DP_FUSE_MASK));
}

/* A bf16 output's gradient is bf16 too where only GEMMs read it: the layer has no bias (whose
 * gradient would sum it outside a GEMM) and its ReLU's backward is the next layer's DRELU, so
 * the next layer's input-gradient GEMM writes it in bf16 and this layer's dW and dX GEMMs read
 * it as their dY copy. */
static void plan_bf16_activations(dp_model *m, const layer_caps *caps)
{
    for (int i = 0; i < m->count; i++) {
        dp_module *mod = &m->modules[i];
        mod->bf16_out = mod->bf16_in = mod->bf16_dy = mod->bf16_dx = 0;
    }
    for (int i = 0; caps->writes_bf16 && i < m->count; i++) {
        dp_module *mod = &m->modules[i];
        if (!bf16_output_safe(m, i))
            continue;
        dp_module *next = &m->modules[i + 1 + mod->absorbs_next];
        mod->bf16_out = next->bf16_in = 1;
        mod->bf16_dy = next->bf16_dx = !mod->options.bias;
    }
}

void dp_model_plan_layers(dp_model *m)
{
    layer_caps caps = caps_of(m->be);
    plan_fusion(m, &caps);
    plan_bf16_activations(m, &caps);
}

size_t dp_model_plan_bf16_on_gpu(dp_model *m)
{
    layer_caps caps = {.writes_bf16 = 1};
    for (int kind = 0; kind < DP_EPILOGUES; kind++)
        caps.fuses[kind] = !dp_epilogue_sums_operand[kind]; /* declined at bf16 */
    plan_fusion(m, &caps);
    plan_bf16_activations(m, &caps);
    size_t saved = 0;
    for (int i = 0; i < m->count; i++)
        if (m->modules[i].bf16_out)
            saved += (size_t)m->max_rows * (size_t)m->modules[i].out_width * 2;
    return saved;
}
