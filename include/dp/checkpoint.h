/* Training checkpoints: safetensors files DIR/step-NNNNNNNNN.safetensors carrying tensors,
 * string metadata and a CRC-32 of the data, written atomically, the newest `keep` kept. */
#ifndef DP_CHECKPOINT_H
#define DP_CHECKPOINT_H

#include "dp/safetensors.h"

#include <stddef.h>

/* Writes the checkpoint of `step` into dir (created if missing), with metadata plus
 * "checksum"; only after it is complete under its final name are older checkpoints beyond
 * the newest `keep` deleted, so a failed write leaves the previous ones intact. */
int dp_checkpoint_save(const char *dir, long step, const dp_tensor_ref *tensors, int count,
                       const char *const *keys, const char *const *values, int meta_count,
                       int keep);

/* The checkpoint file `spec` names: spec itself when it is a file, else the newest
 * step-*.safetensors in the directory spec. */
int dp_checkpoint_find(const char *spec, char *path, size_t size);

/* Reads tensors and metadata from path and verifies the checksum over the tensors. */
int dp_checkpoint_load(const char *path, dp_tensor_ref *tensors, int count, dp_meta *meta,
                       int meta_count);

#endif
