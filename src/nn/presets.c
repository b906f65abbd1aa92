/* --model presets: torchvision's ResNets (resnet18 ... resnet152, any input size, the class count
 * from the data) and a small ResNet for 28x28 images, each written out as --model text whose
 * labels give torchvision's tensor names (conv1.weight, layer1.0.bn1.running_mean,
 * layer2.0.downsample.0.weight, fc.bias), so a checkpoint loads into
 * torchvision.models.resnet18(num_classes=K) with strict=True. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <stdio.h>
#include <string.h>

#define STAGES_MAX 4

typedef struct dp_model_preset {
    const char *name;
    int stages, blocks[STAGES_MAX];      /* blocks per stage (torchvision's layer1..layer4) */
    int bottleneck;                      /* Bottleneck blocks (1x1, 3x3, 1x1; 4x wider out); else BasicBlock */
    int width;                           /* the first stage's channels, doubled at each stage after */
    int imagenet_stem;                   /* 7x7 stride-2 conv and 3x3 stride-2 max pool; else one 3x3 conv */
} dp_model_preset;

/* resnet: a CIFAR-style ResNet-14 for 28x28 images (3x3 stem, no max pool, 3 stages of 2 BasicBlocks
 * at 16, 32, 64 channels); the others are torchvision's layouts. */
static const dp_model_preset presets[] = {
    {"resnet", 3, {2, 2, 2}, 0, 16, 0},
    {"resnet18", 4, {2, 2, 2, 2}, 0, 64, 1},
    {"resnet34", 4, {3, 4, 6, 3}, 0, 64, 1},
    {"resnet50", 4, {3, 4, 6, 3}, 1, 64, 1},
    {"resnet101", 4, {3, 4, 23, 3}, 1, 64, 1},
    {"resnet152", 4, {3, 8, 36, 3}, 1, 64, 1},
};

const dp_model_preset *dp_model_preset_find(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

const char *dp_model_preset_names(void)
{
    static char names[256];
    if (!names[0])
        for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", presets[i].name);
    return names;
}

/* Appends to text as snprintf would; *used stays at most size - 1 and a cut is reported. */
typedef struct writer {
    char *text;
    size_t size, used;
    int cut;
} writer;

static void put(writer *w, const char *format, int a, int b)
{
    int n = snprintf(w->text + w->used, w->size - w->used, format, a, b);
    if (n < 0 || (size_t)n >= w->size - w->used) {
        w->cut = 1;
        w->used = w->size - 1;
        return;
    }
    w->used += (size_t)n;
}

/* One block of stage s (1-based), block b, taking `in` channels: torchvision's BasicBlock or
 * Bottleneck (v1.5: the stride on the 3x3), with a projection where the shape changes. */
static int put_block(writer *w, const dp_model_preset *p, int s, int b, int in)
{
    int planes = p->width << (s - 1), stride = s > 1 && b == 0 ? 2 : 1;
    int out = p->bottleneck ? 4 * planes : planes;
    put(w, ",layer%d.%d:residual{", s, b);
    if (p->bottleneck) {
        put(w, "conv1:conv2d(%d,1,bias=0),bn1:batchnorm,relu,", planes, 0);
        put(w, "conv2:conv2d(%d,3,stride=%d,padding=1,bias=0),bn2:batchnorm,relu,", planes, stride);
        put(w, "conv3:conv2d(%d,1,bias=0),bn3:batchnorm", out, 0);
    } else {
        put(w, "conv1:conv2d(%d,3,stride=%d,padding=1,bias=0),bn1:batchnorm,relu,", planes, stride);
        put(w, "conv2:conv2d(%d,3,padding=1,bias=0),bn2:batchnorm", planes, 0);
    }
    if (stride != 1 || in != out)
        put(w, "|downsample.0:conv2d(%d,1,stride=%d,bias=0),downsample.1:batchnorm", out, stride);
    put(w, "}", 0, 0);
    return out;
}

int dp_model_preset_write(const dp_model_preset *p, char *text, size_t size)
{
    writer w = {.text = text, .size = size};
    text[0] = '\0';
    if (p->imagenet_stem)
        put(&w, "conv1:conv2d(%d,7,stride=2,padding=3,bias=0),bn1:batchnorm,relu,maxpool(3,stride=2,padding=1)",
            p->width, 0);
    else
        put(&w, "conv1:conv2d(%d,3,padding=1,bias=0),bn1:batchnorm,relu", p->width, 0);
    int channels = p->width;
    for (int s = 1; s <= p->stages; s++)
        for (int b = 0; b < p->blocks[s - 1]; b++)
            channels = put_block(&w, p, s, b, channels);
    /* The class count is set once the data says it (dp_model_spec_set_classes). */
    put(&w, ",avgpool:globalavgpool,flatten,fc:linear(1)", 0, 0);
    return w.cut ? dp_fail(DP_EINVAL, "--model %s: its modules are longer than the %zu characters written out", p->name,
                           size - 1)
                 : 0;
}
