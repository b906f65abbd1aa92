/* Safetensors checkpoints (https://github.com/huggingface/safetensors): an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte range, then the data.
 * F32 and I64 tensors are written and accepted (dp_tensor_ref.dtype). */
#ifndef DP_SAFETENSORS_H
#define DP_SAFETENSORS_H

#include "dp/tensor.h"

/* Writes tensors (in the given order, data back to back) and string metadata pairs
 * meta_keys[i] = meta_values[i] under "__metadata__" to path. The header is compact JSON
 * escaped as the reference implementation does and space-padded so the data starts 8-byte
 * aligned. Written through dp_write_file_atomically (a temporary, fsync'd, renamed; a path
 * that is not a regular file is refused), so a crash never leaves a partial file under the
 * final name. Returns DP_EINVAL for a bad shape, a duplicate tensor name or metadata key or
 * the reserved name "__metadata__", DP_EIO when the file cannot be written, DP_ENOMEM. */
int dp_safetensors_write(const char *path, const dp_tensor_ref *tensors, int count,
                         const char *const *meta_keys, const char *const *meta_values,
                         int meta_count);

/* Fills elements [first, first + count) of tensor `tensor` into buf, for a streamed write. */
typedef int (*dp_tensor_fill_fn)(void *arg, int tensor, size_t first, size_t count, void *buf);

/* dp_safetensors_write where the tensors whose data is NULL are asked of fill in pieces of at
 * most `piece` elements, tensor by tensor in order, each written before the next is asked, so
 * the writer holds one piece at a time. fill's error ends the write (no file is left) and
 * is returned with its message. */
int dp_safetensors_write_streamed(const char *path, const dp_tensor_ref *tensors, int count,
                                  const char *const *meta_keys, const char *const *meta_values,
                                  int meta_count, dp_tensor_fill_fn fill, void *arg, size_t piece);

/* Reads path and fills each expected tensor's data (caller-allocated) by name. path must be a
 * regular file (dp_open_input_fd). The whole header is checked as the format's reference
 * implementation checks it: UTF-8 JSON; "__metadata__" an object of strings (or null); every
 * other member a tensor entry with a known dtype, a shape and data_offsets spanning exactly
 * the shape's bytes; no key twice (tensor, metadata or entry field; escapes decoded first); and
 * the tensors' ranges tiling the data section exactly, with no overlap, hole or trailing byte.
 * Every expected name must be present with the expected dtype and exactly the expected shape;
 * extra tensors are allowed, and the tensors may lie in any order (the reference
 * implementation sorts them by name). Fails with a message naming the file and the problem:
 * DP_EIO when the file cannot be opened or read or is not a regular file; DP_EFORMAT for any
 * of the above, a header length beyond the file or over 100 MB, a missing tensor, a wrong
 * dtype or shape. Every entry is checked before any data is copied, so a malformed file
 * leaves the buffers untouched. */
int dp_safetensors_read(const char *path, dp_tensor_ref *expected, int count);
/* The shape of path's tensor `name` (dims gets the first DP_TENSOR_MAX_DIMS), its header checked
 * as dp_safetensors_read checks it; DP_EFORMAT naming both when the file has no such tensor. */
int dp_safetensors_tensor_shape(const char *path, const char *name, int *ndim, int64_t *dims);

#define DP_META_KEY_MAX 64
#define DP_META_VALUE_MAX 1024

/* One "__metadata__" entry: the caller names the key, the reader fills the value. */
typedef struct dp_meta {
    char key[DP_META_KEY_MAX];
    char value[DP_META_VALUE_MAX]; /* "" when the file has no such key */
} dp_meta;

/* dp_safetensors_read, also filling meta[i].value for each meta[i].key; a value longer than
 * DP_META_VALUE_MAX - 1 bytes is DP_EFORMAT. */
int dp_safetensors_read_with_metadata(const char *path, dp_tensor_ref *expected, int count,
                                      dp_meta *meta, int meta_count);

/* dp_safetensors_read_with_metadata for parts of tensors: the whole header is checked as
 * there (each tensor's dtype and whole shape too), then only each part's bytes are read, so
 * no reader ever holds a whole tensor it does not need. A part beyond its tensor is
 * DP_EINVAL. */
int dp_safetensors_read_parts(const char *path, dp_tensor_part *parts, int count, dp_meta *meta,
                              int meta_count);
/* dp_safetensors_read_parts, strictly as PyTorch's load_state_dict(strict=True): a tensor of the
 * file that no part asks for (and whose name does not start with `ignored`, when not NULL) is
 * DP_EFORMAT, naming every such tensor. */
int dp_safetensors_read_parts_strict(const char *path, dp_tensor_part *parts, int count, const char *ignored);

/* A file's CRC-32 of itself: the value of its crc_key metadata entry. */
#define DP_SAFETENSORS_CRC_PREFIX "crc32-file:"

/* dp_safetensors_write plus the metadata entry crc_key = "crc32-file:XXXXXXXX", the CRC-32
 * (zlib's) of the whole file as written with those eight hex digits as '0', so a change to any
 * byte (header, metadata or data) is detected by dp_safetensors_verify_crc. */
int dp_safetensors_write_with_crc(const char *path, const dp_tensor_ref *tensors, int count,
                                  const char *const *meta_keys, const char *const *meta_values,
                                  int meta_count, const char *crc_key);

/* Checks path's header as dp_safetensors_read does and its crc_key entry against the CRC of
 * all its bytes. DP_EFORMAT "checksum mismatch" when they differ, or when the entry is absent
 * or not "crc32-file:" and 8 lowercase hex digits; DP_EIO when it cannot be read. */
int dp_safetensors_verify_crc(const char *path, const char *crc_key);

#endif
