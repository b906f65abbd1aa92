/* The launcher's view of the job, as batch scripts and torchrun-style setups export it
 * (WORLD_SIZE, RANK, LOCAL_RANK, and Open MPI's OMPI_COMM_WORLD_RANK), checked against the
 * world MPI actually started, so a mis-launched job stops instead of training silently with
 * the wrong world. Ranks always come from MPI; these variables are only compared. */
#ifndef DP_LAUNCH_ENV_H
#define DP_LAUNCH_ENV_H

/* 0 when every variable that is set agrees with MPI's rank, size and local rank (rank among
 * the ranks on this node); otherwise DP_EINVAL with a message naming the variable, its
 * value and MPI's value. A set variable that is not a non-negative integer is an error too. */
int dp_launch_env_check(int rank, int size, int local_rank);

#endif
