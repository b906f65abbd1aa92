# Sourced by the scripts: Open MPI settings for a workstation run.
# Open MPI refuses to run as root without these two; they change nothing for other users.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# More ranks than cores is allowed (slow, but it runs); the ranks then yield while waiting.
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
