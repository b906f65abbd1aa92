/* Byte counts as people write them on command lines and in tables: 4096, 64K, 16M, 1G. */
#ifndef DP_UNITS_H
#define DP_UNITS_H

#include <stddef.h>

/* Parses digits with an optional K, M or G suffix (powers of 1024, as nccl-tests reads -b
 * and -e). Returns 1 and sets *bytes, or 0 when text is not such a count or overflows. */
int dp_parse_bytes(const char *text, size_t *bytes);

#endif
