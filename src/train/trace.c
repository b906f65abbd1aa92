#include "src/train/trace.h"

#include "dp/atomic_file.h"
#include "dp/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest JSON text of one span: the fixed fields, the name and numbers. */
#define SPAN_TEXT_MAX (DP_TRACE_NAME_MAX + 160)

static const char *const lane_names[DP_LANES] = {[DP_LANE_COMPUTE] = "compute", [DP_LANE_COMM] = "communication",
                                                  [DP_LANE_DEVICE] = "device (CUDA events)"};

int dp_trace_open(dp_trace *trace, dp_comm *comm, size_t capacity)
{
    memset(trace, 0, sizeof *trace);
    trace->spans = dp_calloc(capacity ? capacity : 1, sizeof *trace->spans, "the --trace spans");
    if (!trace->spans)
        return DP_ENOMEM;
    trace->capacity = capacity;
    trace->rank = comm->rank;
    DP_MPI_CHECK(MPI_Barrier(comm->comm));
    trace->origin = MPI_Wtime();
    return 0;
}

void dp_trace_close(dp_trace *trace)
{
    free(trace->spans);
    memset(trace, 0, sizeof *trace);
}

void dp_trace_add(dp_trace *trace, const char *name, const char *category, dp_trace_lane lane, double begin,
                  double end)
{
    if (!trace || !trace->spans)
        return;
    if (trace->count == trace->capacity) {
        trace->dropped++;
        return;
    }
    dp_trace_span *s = &trace->spans[trace->count++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->category = category;
    s->lane = lane;
    s->begin = begin;
    s->end = end;
}

/* This rank's spans as comma-terminated JSON events: its process and lane names, then the
 * spans in microseconds from the common origin. Returns the text (malloc'd) and its length. */
static char *rank_events(const dp_trace *trace, size_t *length)
{
    size_t capacity = (trace->count + 1 + DP_LANES) * SPAN_TEXT_MAX;
    char *text = dp_alloc(capacity, "the trace's text");
    if (!text)
        return NULL;
    int r = trace->rank;
    size_t used = (size_t)snprintf(text, capacity,
                                   "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d%s\"}},\n",
                                   r, r, trace->dropped ? " (spans dropped: trace full)" : "");
    int lanes = DP_LANE_DEVICE; /* the device's lane only where it has spans (GPU backends) */
    for (size_t i = 0; i < trace->count; i++)
        if (trace->spans[i].lane == DP_LANE_DEVICE)
            lanes = DP_LANES;
    for (int lane = 0; lane < lanes; lane++)
        used += (size_t)snprintf(text + used, capacity - used,
                                 "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}},\n",
                                 r, lane, lane_names[lane]);
    for (size_t i = 0; i < trace->count; i++) {
        const dp_trace_span *s = &trace->spans[i];
        used += (size_t)snprintf(text + used, capacity - used,
                                 "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"cat\":\"%s\",\"ts\":%.3f,\"dur\":%.3f},\n",
                                 r, (int)s->lane, s->name, s->category, 1e6 * (s->begin - trace->origin),
                                 1e6 * (s->end - s->begin));
    }
    *length = used;
    return text;
}

typedef struct trace_file {
    const char *events;
    size_t length;
} trace_file;

static int write_trace(FILE *f, const void *context)
{
    const trace_file *file = context;
    /* The last event's comma is dropped: ",\n" becomes "\n". */
    size_t body = file->length >= 2 ? file->length - 2 : 0;
    if (fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f) == EOF ||
        fwrite(file->events, 1, body, f) != body || fputs("\n]}\n", f) == EOF)
        return -1;
    return 0;
}

/* 1 on every rank when any rank's flag is set, so every rank leaves together. */
static int any_rank(dp_comm *comm, int flag, int *any)
{
    DP_MPI_CHECK(MPI_Allreduce(&flag, any, 1, MPI_INT, MPI_LOR, comm->comm));
    return 0;
}

int dp_trace_write(dp_trace *trace, dp_comm *comm, const char *path)
{
    size_t length = 0;
    char *mine = rank_events(trace, &length);
    int size = comm->size, failed = 0, status = 0;
    int *lengths = comm->rank == 0 ? dp_calloc(2 * (size_t)size, sizeof *lengths, "the trace lengths") : NULL;
    if (!mine || (comm->rank == 0 && !lengths) || length > (size_t)1 << 30)
        status = length > (size_t)1 << 30 ? dp_fail(DP_EINVAL, "--trace %s: rank %d's spans take over 1 GiB of text",
                                                    path, comm->rank)
                                          : DP_ENOMEM;
    char *all = NULL;
    int my_length = (int)length, *offsets = lengths ? lengths + size : NULL;
    int error = any_rank(comm, status != 0, &failed);
    if (error || failed) {
        status = error ? error : status;
        goto done;
    }
    DP_MPI_CHECK(MPI_Gather(&my_length, 1, MPI_INT, lengths, 1, MPI_INT, 0, comm->comm));
    size_t total = 0;
    for (int r = 0; comm->rank == 0 && r < size; r++) {
        offsets[r] = (int)total;
        total += (size_t)lengths[r];
    }
    if (comm->rank == 0 && (total > (size_t)1 << 30 || !(all = dp_alloc(total + 1, "the trace"))))
        status = total > (size_t)1 << 30 ? dp_fail(DP_EINVAL, "--trace %s: over 1 GiB of text", path) : DP_ENOMEM;
    error = any_rank(comm, status != 0, &failed);
    if (error || failed) {
        status = error ? error : status;
        goto done;
    }
    DP_MPI_CHECK(MPI_Gatherv(mine, my_length, MPI_CHAR, all, lengths, offsets, MPI_CHAR, 0, comm->comm));
    if (comm->rank == 0) {
        trace_file file = {all, total};
        status = dp_write_file_atomically(path, write_trace, &file);
    }
done:
    free(mine);
    free(all);
    free(lengths);
    if (!status && failed)
        status = dp_fail(DP_EIO, "--trace %s: another rank could not gather its spans", path);
    return status;
}
