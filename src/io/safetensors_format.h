/* What the safetensors reader and writer share: the framing constants, the check of
 * caller-supplied tensor views, and the CRC-32 a file may carry of itself. */
#ifndef DP_IO_SAFETENSORS_FORMAT_H
#define DP_IO_SAFETENSORS_FORMAT_H

#include "dp/tensor.h"

#include <stddef.h>

/* Tensor bytes go to and from disk unconverted, and the format is little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors I/O assumes a little-endian host"
#endif
_Static_assert(sizeof(float) == 4, "safetensors F32 needs a 4-byte float");

#define ST_PREFIX_BYTES 8
/* The reference implementation's limit; it also caps what a corrupt prefix makes us allocate. */
#define ST_MAX_HEADER_BYTES 100000000u
/* The file's own CRC: DP_SAFETENSORS_CRC_PREFIX then these many hex digits, written as this
 * blank while the CRC is computed and checked. */
#define ST_CRC_DIGITS 8
#define ST_CRC_BLANK "00000000"

/* Shape and name sanity for caller-supplied tensors, so offsets and messages stay well
 * defined: DP_EINVAL naming path and the tensor. */
int st_check_tensor_refs(const char *path, const dp_tensor_ref *tensors, int count);
/* The same for tensor i alone, its data needed only when elements elements go there. */
int st_check_tensor_ref(const char *path, const dp_tensor_ref *t, int i, int64_t elements);

/* zlib's CRC-32 continued over len bytes (any length). */
unsigned long st_crc_update(unsigned long crc, const void *data, size_t len);

/* The CRC-32 of nothing, to start from. */
unsigned long st_crc_start(void);

#endif
