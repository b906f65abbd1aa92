/* --help of each program, made from the option rows: its usage, then its options under the
 * groups' headings, each with its default; the model's modules, and for training the
 * strategies and the all-reduce algorithms. */
#include "src/train/option_table.h"

#include "dp/comm.h"
#include "dp/strategy.h"

#include <stdio.h>

static const char *const headings[DP_GROUPS] = {
    [DP_GROUP_DATA] = "Data", [DP_GROUP_MODEL] = "Model", [DP_GROUP_OPTIMIZER] = "Optimizer",
    [DP_GROUP_STRATEGY] = "Strategy", [DP_GROUP_DEVICE] = "Device and precision",
    [DP_GROUP_CHECKPOINTS] = "Checkpoints", [DP_GROUP_OUTPUT] = "Output", [DP_GROUP_RELIABILITY] = "Reliability",
};

/* " [default: ...]": the default as the option's value (or, where the strategy's rows have none,
 * the default strategy and the keys' own), what another option's value makes it, and its note. */
static void print_default(const dp_option_row *r, FILE *out)
{
    if (r->kind == DP_OPTION_HELP || r->kind == DP_OPTION_VERSION)
        return;
    char value[96] = "";
    dp_strategy_choice strategy;
    if (r->fallback) {
        snprintf(value, sizeof value, "%s", r->fallback);
    } else if (r->kind == DP_OPTION_STRATEGY && r->size) {
        dp_strategy_choice_default(&strategy);
        snprintf(value, sizeof value, "%s", strategy.name);
    } else if (r->kind == DP_OPTION_STRATEGY_KEY)
        snprintf(value, sizeof value, "the strategy's :%s, under Strategies", r->strategy.key);
    else if (!r->metavar && !r->note)
        snprintf(value, sizeof value, "off");
    fprintf(out, " [default: %s", value);
    if (r->depends.option)
        fprintf(out, "; %s with --%s %s", r->depends.fallback, r->depends.option, r->depends.values);
    if (r->note)
        fprintf(out, value[0] ? " (%s)" : "%s", r->note);
    fputc(']', out);
}

static void print_row(const dp_option_row *r, FILE *out)
{
    char flag[64];
    snprintf(flag, sizeof flag, "--%s%s%s", r->name, r->metavar ? " " : "", r->metavar ? r->metavar : "");
    fprintf(out, "  %-28s %s", flag, r->help);
    print_default(r, out);
    fputc('\n', out);
}

static void print_modules(FILE *out)
{
    fprintf(out, "\n--model modules: linear(OUT, bias=1), relu, batchnorm(momentum=0.1, eps=1e-5, sync=0), "
                 "dropout(P=0.5), conv2d(OUT, K, stride=1, padding=0, bias=1), maxpool(K, stride=K, padding=0), "
                 "avgpool(K, stride=K, padding=0), globalavgpool, flatten, and residual blocks "
                 "residual(relu=1){BODY | SHORTCUT} (relu(body(x) + shortcut(x)); no '| SHORTCUT': the identity); "
                 "'NAME:module' names a module's tensors NAME.*\n"
                 "Presets: %s (torchvision's ResNets: resnet18 ... resnet152, their tensor names; resnet: a small one "
                 "for 28x28 images); the class count comes from the data\n"
                 "Images ([N, 1, 28, 28] IDX, [N, C, H, W] .npy) go through conv2d and pooling; a linear after them "
                 "needs flatten (as nn.Flatten), a linear on the data itself flattens it. A CNN for Fashion-MNIST "
                 "(bench/RESULTS.md):\n  --model 'conv2d(32,3,padding=1,bias=0),batchnorm,relu,maxpool(2),"
                 "conv2d(64,3,padding=1,bias=0),batchnorm,relu,maxpool(2),flatten,linear(128),relu,dropout(0.3),"
                 "linear(10)' --sync-bn --optimizer adamw --lr 0.002 --weight-decay 0.05 --lr-schedule cosine --epochs 15 "
                 "--batch 128\nA ResNet for Fashion-MNIST (bench/RESULTS.md):\n  --model resnet --sync-bn --optimizer sgd "
                 "--lr 0.1 --momentum 0.9 --weight-decay 5e-4 --lr-schedule cosine --warmup-steps 200 --epochs 15 "
                 "--batch 128\n", dp_model_preset_names());
}

void dp_options_print_program_help(const dp_option_program *p, FILE *out)
{
    fputs(p->usage, out);
    for (int group = 0; group < DP_GROUPS; group++) {
        int shown = 0;
        for (int i = 0; i < dp_option_row_count; i++) {
            const dp_option_row *r = &dp_option_rows[i];
            if (r->group != (dp_option_group)group || !(r->programs & p->mask))
                continue;
            if (!shown++)
                fprintf(out, "\n%s:\n", headings[group]);
            print_row(r, out);
        }
    }
    print_modules(out);
    if (!(p->mask & DP_PROGRAM_TRAIN))
        return;
    fprintf(out, "\nStrategies (--strategy NAME[:KEY=VALUE,...]):\n");
    dp_strategy_print_help(out);
    fprintf(out, "All-reduce algorithms: %s\n", dp_comm_algorithm_names());
    if (*dp_comm_gpu_algorithm_names())
        fprintf(out, "On GPU memory only (--device cuda): %s\n", dp_comm_gpu_algorithm_names());
}

void dp_options_print_help(FILE *out)
{
    dp_options_print_program_help(dp_option_program_named(NULL), out);
}
