/* FNV-1a over bytes (64-bit): the replica checks' fingerprint, streamable (hashing A then B
 * continues from A's value), and any flipped bit changes it. */
#ifndef DP_HASH_H
#define DP_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DP_HASH_START 1469598103934665603ULL

static inline uint64_t dp_hash_bytes(uint64_t hash, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++)
        hash = (hash ^ p[i]) * 1099511628211ULL;
    return hash;
}

#endif
