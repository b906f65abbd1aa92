/* What the run writes, checked on the rank that writes it (rank 0) before any training, so a
 * bad path fails in seconds instead of after hours: --save, --trace, --metrics and --checkpoint-dir can be
 * created there, and the checkpoint directory holds no other run's checkpoints. */
#include "src/train/trainer.h"

#include "dp/atomic_file.h"
#include "dp/error.h"

#include <stdio.h>

int dp_trainer_check_outputs(const trainer *t)
{
    const dp_options *o = t->o;
    if (t->comm->rank != 0)
        return 0;
    int status = o->save_path[0] ? dp_check_output_file("--save", o->save_path) : 0;
    if (!status && o->trace_path[0])
        status = dp_check_output_file("--trace", o->trace_path);
    if (!status && o->metrics_path[0])
        status = dp_check_output_file("--metrics", o->metrics_path);
    if (!status && o->checkpoint_dir[0])
        status = dp_check_output_dir("--checkpoint-dir", o->checkpoint_dir);
    return status;
}

static int claim_on_rank0(trainer *t)
{
    const dp_options *o = t->o;
    /* A resumed run keeps the identity its checkpoint recorded (load_checkpoint set it). */
    if (!o->resume[0])
        dp_checkpoint_new_run_id(t->run_id);
    if (!o->checkpoint_dir[0])
        return 0;
    long later = -1;
    int status = dp_checkpoint_claim_dir(o->checkpoint_dir, t->run_id, t->start_step, &later);
    if (!status && later >= 0)
        fprintf(stderr, "dp_worker: warning: --checkpoint-dir %s holds checkpoints of this run up "
                "to step %ld, beyond the starting step %ld: they are replaced as training "
                "reaches them, and until then --resume of the directory picks step %ld\n",
                o->checkpoint_dir, later, t->start_step, later);
    return status;
}

int dp_trainer_claim_checkpoint_dir(trainer *t)
{
    int status = t->comm->rank == 0 ? claim_on_rank0(t) : 0;
    /* Every rank writes its own shard with the run's identity (--checkpoint-shards). */
    return status ? status : dp_comm_broadcast(t->comm, t->run_id, sizeof t->run_id, 0);
}
