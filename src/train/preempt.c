/* Preemption: a handled signal only sets a flag; at every step boundary the ranks all-reduce
 * (MAX) their flags with a non-blocking all-reduce that completes at the next boundary, so
 * the agreement costs no waiting (the step's own collectives have already brought every rank
 * past the previous boundary) and every rank stops after the same step. The wait is watched
 * as every collective's is: a rank that never arrives is reported, not waited for forever. */
#include "src/train/preempt.h"

#include "dp/comm.h"
#include "dp/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define SIG_PREFIX "SIG"
#define AGREEMENT "the preemption agreement (an all-reduce of the ranks' signal flags)"

static const struct {
    const char *name; /* SIG_PREFIX and the name --preempt-signal takes */
    int number;
} preempt_signals[] = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP},
};
enum { SIGNAL_COUNT = sizeof preempt_signals / sizeof *preempt_signals };
_Static_assert(SIGNAL_COUNT <= DP_PREEMPT_SIGNALS_MAX, "dp_preempt keeps a previous action per signal");

/* The table's index of a name with or without its SIG prefix, in any case; -1 if absent. */
static int signal_index(const char *name, size_t len)
{
    size_t prefix = strlen(SIG_PREFIX);
    if (len > prefix && strncasecmp(name, SIG_PREFIX, prefix) == 0)
        name += prefix, len -= prefix;
    for (int i = 0; i < SIGNAL_COUNT; i++) {
        const char *known = preempt_signals[i].name + prefix;
        if (strlen(known) == len && strncasecmp(name, known, len) == 0)
            return i;
    }
    return -1;
}

int dp_preempt_parse_signals(const char *option, const char *text, unsigned *signals)
{
    *signals = 0;
    if (strcmp(text, "none") == 0)
        return 0;
    for (const char *p = text;; p++) {
        size_t len = strcspn(p, ",");
        int i = signal_index(p, len);
        if (i < 0)
            return dp_fail(DP_EINVAL, "%s '%s': '%.*s' is not a signal it handles: give a comma-separated list of "
                           "USR1, USR2, TERM, INT, HUP, or none", option, text, (int)len, p);
        *signals |= 1u << i;
        p += len;
        if (!*p)
            return 0;
    }
}

const char *dp_preempt_signal_name(int number)
{
    for (int i = 0; i < SIGNAL_COUNT; i++)
        if (preempt_signals[i].number == number)
            return preempt_signals[i].name;
    return "a signal";
}

void dp_preempt_signal_names(unsigned signals, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "%s", signals ? "" : "none");
    for (int i = 0; i < SIGNAL_COUNT && used < size; i++)
        if (signals & (1u << i))
            used += (size_t)snprintf(text + used, size - used, "%s%s", used ? "," : "", preempt_signals[i].name);
}

/* The newest handled signal's number; 0 until one arrives. */
static volatile sig_atomic_t received_signal;

static void note_signal(int number)
{
    received_signal = number;
}

/* note_signal for each signal of the set; the actions replaced into previous (if not NULL). */
static int install(unsigned signals, struct sigaction *previous)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = note_signal;
    action.sa_flags = SA_RESTART; /* a checkpoint's write or fsync goes on instead of failing */
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < SIGNAL_COUNT; i++)
        if ((signals & (1u << i)) && sigaction(preempt_signals[i].number, &action, previous ? &previous[i] : NULL) != 0)
            return dp_fail(DP_EIO, "--preempt-signal: cannot handle %s: %s", preempt_signals[i].name,
                           strerror(errno));
    return 0;
}

int dp_preempt_catch(unsigned signals)
{
    return install(signals, NULL);
}

int dp_preempt_start(dp_preempt *p, unsigned signals, dp_comm *comm)
{
    memset(p, 0, sizeof *p);
    p->signals = signals;
    p->comm = comm;
    p->pending = MPI_REQUEST_NULL;
    return install(signals, p->previous);
}

int dp_preempt_poll(dp_preempt *p, int *stop)
{
    *stop = 0;
    if (!p->signals)
        return 0;
    if (p->pending != MPI_REQUEST_NULL) {
        int status = dp_comm_wait_mpi(p->comm, &p->pending, AGREEMENT);
        if (status)
            return status;
        if (p->received && !p->agreed)
            p->agreed = p->received;
    }
    *stop = p->agreed != 0;
    if (*stop)
        return 0;
    p->sent = received_signal;
    DP_MPI_CHECK(MPI_Iallreduce(&p->sent, &p->received, 1, MPI_INT, MPI_MAX, p->comm->comm, &p->pending));
    return 0;
}

int dp_preempt_complete(dp_preempt *p)
{
    return p->pending != MPI_REQUEST_NULL ? dp_comm_wait_mpi(p->comm, &p->pending, AGREEMENT) : 0;
}

void dp_preempt_restore(dp_preempt *p)
{
    for (int i = 0; i < SIGNAL_COUNT; i++)
        if (p->signals & (1u << i))
            sigaction(preempt_signals[i].number, &p->previous[i], NULL);
    p->signals = 0;
    received_signal = 0; /* this run has answered it (or finished regardless) */
}
