#include "src/io/safetensors_format.h"

#include "dp/error.h"

#include <string.h>
#include <zlib.h>

int st_check_tensor_ref(const char *path, const dp_tensor_ref *t, int i, int64_t elements)
{
    if (!memchr(t->name, '\0', sizeof t->name))
        return dp_fail(DP_EINVAL, "%s: tensor %d has an unterminated name", path, i);
    if (t->dtype != DP_DTYPE_F32 && t->dtype != DP_DTYPE_I64)
        return dp_fail(DP_EINVAL, "%s: tensor '%s' has an unknown dtype %d", path, t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > DP_TENSOR_MAX_DIMS)
        return dp_fail(DP_EINVAL, "%s: tensor '%s' has %d dimensions (at most %d supported)", path, t->name, t->ndim,
                       DP_TENSOR_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return dp_fail(DP_EINVAL, "%s: tensor '%s' has a negative dimension", path, t->name);
    if (elements > 0 && !t->data)
        return dp_fail(DP_EINVAL, "%s: tensor '%s' has no data", path, t->name);
    return 0;
}

int st_check_tensor_refs(const char *path, const dp_tensor_ref *tensors, int count)
{
    if (count < 0 || (count > 0 && !tensors))
        return dp_fail(DP_EINVAL, "%s: invalid tensor list (count %d)", path, count);
    for (int i = 0; i < count; i++) {
        int rc = st_check_tensor_ref(path, &tensors[i], i, tensors[i].ndim >= 0 && tensors[i].ndim <= DP_TENSOR_MAX_DIMS
                                                               ? dp_tensor_numel(&tensors[i]) : 0);
        if (rc)
            return rc;
    }
    return 0;
}

unsigned long st_crc_update(unsigned long crc, const void *data, size_t len)
{
    /* zlib takes uInt lengths: large buffers go in pieces. */
    const unsigned char *bytes = data;
    while (len) {
        uInt piece = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = crc32(crc, bytes, piece);
        bytes += piece;
        len -= piece;
    }
    return crc;
}

unsigned long st_crc_start(void)
{
    return crc32(0L, Z_NULL, 0);
}
