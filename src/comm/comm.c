#include "dp/comm.h"

#include "dp/error.h"
#include "src/comm/algorithms.h"

#include <stdlib.h>
#include <string.h>

static const struct dp_allreduce_algorithm algorithms[] = {
    {"mpi", "MPI_Allreduce in place (the library's own choice of algorithm)", dp_allreduce_mpi},
};
#define ALGORITHM_COUNT (sizeof algorithms / sizeof algorithms[0])

const char *dp_comm_algorithm_names(void)
{
    static char names[256];
    if (!names[0])
        for (size_t i = 0; i < ALGORITHM_COUNT; i++) {
            if (i)
                strcat(names, " ");
            strcat(names, algorithms[i].name);
        }
    return names;
}

int dp_mpi_fail(int status, const char *call, const char *file, int line)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(status, text, &len) != MPI_SUCCESS)
        strcpy(text, "unknown MPI error");
    return dp_fail(DP_EMPI, "%s failed at %s:%d: %s", call, file, line, text);
}

static int find_local_rank(dp_comm *c)
{
    MPI_Comm node;
    DP_MPI_CHECK(MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    DP_MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    DP_MPI_CHECK(MPI_Comm_size(node, &c->local_size));
    DP_MPI_CHECK(MPI_Comm_free(&node));
    return 0;
}

int dp_comm_init(dp_comm *c, MPI_Comm comm, const char *algorithm)
{
    memset(c, 0, sizeof *c);
    c->comm = comm;
    for (size_t i = 0; i < ALGORITHM_COUNT; i++)
        if (strcmp(algorithms[i].name, algorithm) == 0)
            c->algorithm = &algorithms[i];
    if (!c->algorithm)
        return dp_fail(DP_EINVAL, "--allreduce '%s': unknown algorithm (valid: %s)", algorithm,
                       dp_comm_algorithm_names());
    DP_MPI_CHECK(MPI_Comm_rank(comm, &c->rank));
    DP_MPI_CHECK(MPI_Comm_size(comm, &c->size));
    return find_local_rank(c);
}

const char *dp_comm_algorithm_name(const dp_comm *c)
{
    return c->algorithm->name;
}

int dp_comm_allreduce_sum(dp_comm *c, float *buf, size_t count)
{
    return c->algorithm->allreduce_sum(c, buf, count);
}

float *dp_comm_scratch(dp_comm *c, size_t count)
{
    if (count <= c->scratch.capacity)
        return c->scratch.data;
    float *grown = dp_alloc(count * sizeof(float), "all-reduce scratch");
    if (!grown)
        return NULL;
    free(c->scratch.data);
    c->scratch.data = grown;
    c->scratch.capacity = count;
    return grown;
}

void dp_comm_free(dp_comm *c)
{
    free(c->scratch.data);
    c->scratch.data = NULL;
    c->scratch.capacity = 0;
}

int dp_comm_sum_doubles(dp_comm *c, double *values, int count)
{
    DP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, c->comm));
    return 0;
}

int dp_comm_broadcast(dp_comm *c, void *buf, size_t bytes, int root)
{
    char *p = buf;
    for (size_t done = 0; done < bytes; done += DP_MPI_MAX_CHUNK) {
        DP_MPI_CHECK(MPI_Bcast(p + done, dp_mpi_chunk(bytes, done), MPI_BYTE, root, c->comm));
    }
    return 0;
}
