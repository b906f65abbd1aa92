/* Preemption (src/train/preempt.c): the signals that ask a run to stop (--preempt-signal),
 * and the step at which every rank stops, agreed by all of them although a signal reaches
 * each rank at its own time. */
#ifndef DP_TRAIN_PREEMPT_H
#define DP_TRAIN_PREEMPT_H

#include "dp/comm.h"

#include <mpi.h>
#include <signal.h>
#include <stddef.h>

/* --preempt-signal's default. A set of signals is a bit set over preempt.c's table, which
 * holds at most DP_PREEMPT_SIGNALS_MAX. */
#define DP_PREEMPT_DEFAULT_SIGNALS "USR1,TERM"
#define DP_PREEMPT_SIGNALS_MAX 8

/* "USR1,TERM" (SIG prefix and case optional), or "none", into a bit set (0 for none). */
int dp_preempt_parse_signals(const char *option, const char *text, unsigned *signals);

/* "SIGUSR1" for a handled signal's number ("a signal" for another). */
const char *dp_preempt_signal_name(int number);

/* The names in a bit set, comma-separated ("none" when empty). */
void dp_preempt_signal_names(unsigned signals, char *text, size_t size);

typedef struct dp_preempt {
    unsigned signals;            /* the handled set; 0: preemption is off and every call a no-op */
    struct sigaction previous[DP_PREEMPT_SIGNALS_MAX]; /* each handled signal's action before dp_preempt_start */
    dp_comm *comm;
    MPI_Request pending;         /* the all-reduce of the flags, started at the last boundary */
    int sent, received;          /* its buffers: this rank's signal, the largest of all ranks' */
    int agreed;                  /* the signal every rank stops for (0: none yet) */
} dp_preempt;

/* Installs the handlers for the rest of the process, before a run starts (dp_worker: once the
 * options are read), so a signal while the data load is kept for the run. */
int dp_preempt_catch(unsigned signals);

/* Installs the handlers for a run (SA_RESTART: an interrupted write goes on, so a checkpoint
 * being written completes); a signal caught before counts. The all-reduces run on comm's ranks,
 * their waits watched by its watchdog. */
int dp_preempt_start(dp_preempt *p, unsigned signals, dp_comm *comm);

/* At a step boundary, on every rank: completes the all-reduce started at the previous one and
 * starts the next. *stop is 1 on every rank alike once some rank had received a signal when
 * it passed the previous boundary: the stop comes at most two steps after the signal. */
int dp_preempt_poll(dp_preempt *p, int *stop);

/* After the last step, on every rank: completes the outstanding all-reduce. */
int dp_preempt_complete(dp_preempt *p);

/* Restores the previous handlers (also after a failed run, whose request is left to MPI_Abort). */
void dp_preempt_restore(dp_preempt *p);

#endif
