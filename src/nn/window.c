/* The sliding window of a conv2d or pooling module: its kernel, stride and padding over one
 * sample's [C, H, W] image, and configure's checks of that image, shared by both types. */
#include "src/nn/module.h"

#include "dp/error.h"

#include <stdint.h>
#include <stdio.h>

int dp_window_over(const dp_module_options *o, const dp_dims *in, dp_window *w)
{
    int stride = o->stride ? o->stride : o->kernel; /* pooling's default stride is its kernel */
    *w = (dp_window){.kernel_h = o->kernel, .kernel_w = o->kernel, .stride = stride, .padding = o->padding};
    if (in->ndim != 3)
        return -1;
    int64_t padded_h = in->dim[1] + 2 * (int64_t)o->padding, padded_w = in->dim[2] + 2 * (int64_t)o->padding;
    if (padded_h < o->kernel || padded_w < o->kernel)
        return -1;
    w->channels = (int)in->dim[0];
    w->height = (int)in->dim[1];
    w->width = (int)in->dim[2];
    w->out_h = (int)((padded_h - o->kernel) / stride + 1);
    w->out_w = (int)((padded_w - o->kernel) / stride + 1);
    return 0;
}

dp_window dp_module_window(const dp_module *m)
{
    dp_window w;
    dp_window_over(&m->options, &m->in_shape, &w);
    return w;
}

int dp_window_configure_image(const dp_module *m, const char *spec)
{
    char text[64];
    dp_dims_text(&m->in_shape, text, sizeof text);
    if (m->in_shape.ndim != 3)
        return dp_fail(DP_EINVAL, "--model '%s': module %d (%s) needs images [C, H, W] but gets %s "
                       "(image data, an .npy of [N, C, H, W], or a conv2d or pool before it)", spec, m->index,
                       m->type->name, text);
    return 0;
}

int dp_window_configure(dp_module *m, const char *spec, const char *noun, dp_window *w)
{
    const dp_module_options *o = &m->options;
    char text[64], padded[48] = "";
    dp_dims_text(&m->in_shape, text, sizeof text);
    int status = dp_window_configure_image(m, spec);
    if (status)
        return status;
    if (o->padding)
        snprintf(padded, sizeof padded, " padded by %d on each side", o->padding);
    if (dp_window_over(o, &m->in_shape, w))
        return dp_fail(DP_EINVAL, "--model '%s': module %d (%s): %s %dx%d is larger than its input %s%s", spec,
                       m->index, m->type->name, noun, o->kernel, o->kernel, text, padded);
    return 0;
}
