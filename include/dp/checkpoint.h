/* Training checkpoints: safetensors files DIR/step-NNNNNNNNN.safetensors carrying tensors,
 * string metadata, the run's identity and a CRC-32 of the whole file, written atomically; a
 * run keeps its newest `keep` and never touches another run's files. */
#ifndef DP_CHECKPOINT_H
#define DP_CHECKPOINT_H

#include "dp/safetensors.h"

#include <stddef.h>

/* Metadata every checkpoint carries besides the caller's: the step (a whole number equal to
 * the one in the file name), the identity of the run that wrote it (16 hex digits, shared by
 * a run and every run resumed from it) and the file's CRC. */
#define DP_CHECKPOINT_STEP_KEY "step"
#define DP_CHECKPOINT_RUN_ID_KEY "run_id"
#define DP_CHECKPOINT_CHECKSUM_KEY "checksum"
#define DP_CHECKPOINT_RUN_ID_LEN 16
/* An index of shards (--checkpoint-shards) says how many there are; a whole file has none. */
#define DP_CHECKPOINT_SHARDS_KEY "shards"
/* The steps a checkpoint lists under this key ("S=V,S=V": --keep-best's best evaluations) are
 * never pruned while it is the newest: pruning keeps the newest `keep` and these. */
#define DP_CHECKPOINT_BEST_KEY "best_steps"
/* The largest step a checkpoint name holds (step-<at most 18 digits>.safetensors). */
#define DP_CHECKPOINT_MAX_STEP 999999999999999999L

/* A fresh run identity: 16 lowercase hex digits from the system's random source. */
void dp_checkpoint_new_run_id(char out[DP_CHECKPOINT_RUN_ID_LEN + 1]);

/* Writes the checkpoint of `step` into dir (created if missing). keys/values must hold
 * DP_CHECKPOINT_STEP_KEY (equal to step) and DP_CHECKPOINT_RUN_ID_KEY; "checksum" is added.
 * A file of that step written by another run is not replaced (DP_EIO). Only after the new file
 * is complete under its final name are this run's older checkpoints (same run_id, lower step)
 * beyond the newest `keep` deleted, except the steps its DP_CHECKPOINT_BEST_KEY lists, so a failed write leaves the previous ones intact and
 * another run's files are never deleted. Stale temporaries of dead writers are removed. */
int dp_checkpoint_save(const char *dir, long step, const dp_tensor_ref *tensors, int count,
                       const char *const *keys, const char *const *values, int meta_count,
                       long keep);

/* A checkpoint written as shards (--checkpoint-shards): each rank writes
 * dir/step-N.rank-R-of-W.safetensors (its part of the flat tensors, with the CRC and the
 * run's identity), and once every shard is complete, rank 0 writes the step's own file with
 * dp_checkpoint_save as the index: --resume finds it as any checkpoint, and pruning an index
 * deletes its shards. A shard's step is its metadata's; its name is not a checkpoint name. */
int dp_checkpoint_shard_name(long step, int rank, int world, char *name, size_t size);
/* Where an index's shard of rank `rank` of `shards` is read from: beside the index and named
 * after it (step-2.safetensors: step-2.rank-R-of-W.safetensors), so files renamed together
 * (unpadded) still resume, and --resume DIR and --resume auto find the same shards. */
int dp_checkpoint_shard_path(const char *index_path, int rank, int shards, char *path, size_t size);

/* Whether a checkpoint directory's housekeeping may replace or delete a file of path's last
 * component: a checkpoint's or a shard's name (step-N[.rank-R-of-W].safetensors), or a
 * writer's temporary of one (NAME.tmp.HOST.PID), which a later run removes. */
int dp_checkpoint_dir_owns(const char *path);
int dp_checkpoint_save_shard(const char *dir, long step, int rank, int world, const dp_tensor_ref *tensors,
                             int count, const char *const *keys, const char *const *values, int meta_count);

/* Readies dir for the run run_id starting at start_step, before any training: creates it if
 * missing, removes stale temporaries, and refuses (DP_EIO, naming the file) when it holds a
 * step-*.safetensors of another run; one that is no readable checkpoint (which --resume passes
 * over too) is warned of on stderr and replaced if the run reaches its step. *later_step gets the newest step
 * of this run's checkpoints beyond start_step (they will be replaced as the run reaches them),
 * or -1. Messages start with "--checkpoint-dir DIR". */
int dp_checkpoint_claim_dir(const char *dir, const char *run_id, long start_step,
                            long *later_step);

/* The checkpoint file `spec` names: spec itself when it is a regular file, else the newest
 * complete checkpoint of the directory spec, as --resume auto finds it
 * (dp_checkpoint_find_complete; none is DP_EIO); skipped gets the newer ones passed over. Non-regular
 * files are refused. */
int dp_checkpoint_find(const char *spec, char *path, size_t size, char *skipped, size_t skipped_size);

/* The newest complete checkpoint in dir into path: one whose checksum and identity pass
 * dp_checkpoint_read_metadata and, for an index, whose every shard does too. path is ""
 * when dir is missing or holds none. skipped gets the newer ones passed over, each with its
 * reason ("" when none). */
int dp_checkpoint_find_complete(const char *dir, char *path, size_t size, char *skipped, size_t skipped_size);

/* Reads path's metadata into meta[i].value for each meta[i].key after checking that it is a
 * dptrain checkpoint: its CRC matches every byte, its step is a whole number equal to the
 * step in its file name (when named step-N.safetensors) and its run_id is well formed.
 * DP_EFORMAT "not a dptrain checkpoint" for a file without a checksum (a --save file). */
int dp_checkpoint_read_metadata(const char *path, dp_meta *meta, int meta_count);

/* dp_checkpoint_read_metadata, then the tensors. */
int dp_checkpoint_load(const char *path, dp_tensor_ref *tensors, int count, dp_meta *meta,
                       int meta_count);

#endif
