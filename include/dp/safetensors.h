/* Safetensors checkpoints (https://github.com/huggingface/safetensors): an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte range, then the data.
 * Only F32 tensors are written or accepted. */
#ifndef DP_SAFETENSORS_H
#define DP_SAFETENSORS_H

#include "dp/tensor.h"

/* Writes tensors (in the given order, data back to back) and string metadata pairs
 * meta_keys[i] = meta_values[i] under "__metadata__" to path. The header is compact JSON
 * escaped as the reference implementation does and space-padded so the data starts 8-byte
 * aligned. Written to "path.tmp.<pid>", fsync'd, then renamed, so a crash never leaves a
 * partial file under the final name; on failure the temporary file is removed.
 * Returns DP_EINVAL for a bad shape, a duplicate name or the reserved name "__metadata__",
 * DP_EIO when the file cannot be written, DP_ENOMEM. */
int dp_safetensors_write(const char *path, const dp_tensor_ref *tensors, int count,
                         const char *const *meta_keys, const char *const *meta_values,
                         int meta_count);

/* Reads path and fills each expected tensor's data (caller-allocated) by name. Every expected
 * name must be present as F32 with exactly the expected shape; extra tensors and
 * "__metadata__" are ignored, and the tensors may lie in any order (the reference
 * implementation sorts them by name). Fails with a message naming the file and the problem:
 * DP_EIO when the file cannot be opened or read; DP_EFORMAT on a header length beyond the file
 * or over 100 MB, malformed JSON, missing tensor, wrong dtype, shape mismatch, data offsets out
 * of bounds or not matching the shape. Every entry is checked before any data is copied, so
 * a malformed file leaves the buffers untouched. */
int dp_safetensors_read(const char *path, dp_tensor_ref *expected, int count);

#define DP_META_KEY_MAX 64
#define DP_META_VALUE_MAX 1024

/* One "__metadata__" entry: the caller names the key, the reader fills the value. */
typedef struct dp_meta {
    char key[DP_META_KEY_MAX];
    char value[DP_META_VALUE_MAX]; /* "" when the file has no such key */
} dp_meta;

/* dp_safetensors_read, also filling meta[i].value for each meta[i].key; a value that is not
 * a string or is longer than DP_META_VALUE_MAX - 1 bytes is DP_EFORMAT. */
int dp_safetensors_read_with_metadata(const char *path, dp_tensor_ref *expected, int count,
                                      dp_meta *meta, int meta_count);

#endif
