/* A dp_comm's MPI side: its private communicator, request pool and place in its node, opened
 * and closed; and rank groups, communicators over subsets of its ranks (the world, this rank's
 * node, the nodes' leaders), so that a collective can run on a part of the job: hier's levels
 * (each a dp_comm opened here), dp_bench --group. */
#include "src/comm/request.h"

#include "dp/error.h"

#include <string.h>

static const char *const group_names[DP_GROUP_KINDS] = {"world", "node", "leaders"};

const char *dp_group_name(dp_group group)
{
    return (unsigned)group < DP_GROUP_KINDS ? group_names[group] : "unknown";
}

int dp_group_parse(const char *name, dp_group *group)
{
    for (int g = 0; g < DP_GROUP_KINDS; g++)
        if (strcmp(name, group_names[g]) == 0) {
            *group = (dp_group)g;
            return 0;
        }
    return dp_fail(DP_EINVAL, "group '%s': unknown (valid: world node leaders)", name);
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

int dp_comm_open_mpi(dp_comm *c, MPI_Comm comm, const struct dp_algorithm *algorithm)
{
    memset(c, 0, sizeof *c);
    c->comm = comm;
    c->requests_comm = MPI_COMM_NULL;
    c->node = -1;
    c->algorithm = algorithm;
    DP_MPI_CHECK(MPI_Comm_rank(c->comm, &c->rank));
    DP_MPI_CHECK(MPI_Comm_size(c->comm, &c->size));
    DP_MPI_CHECK(MPI_Comm_dup(c->comm, &c->requests_comm));
    /* As on the caller's communicator: errors come back as codes, reported with context. */
    DP_MPI_CHECK(MPI_Comm_set_errhandler(c->requests_comm, MPI_ERRORS_RETURN));
    int status = dp_request_pool_open(c);
    return status ? status : find_local_rank(c);
}

void dp_comm_close_mpi(dp_comm *c)
{
    dp_request_pool_free(c);
    if (c->requests_comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->requests_comm);
}

static int split_world(const dp_comm *c, MPI_Comm *world)
{
    DP_MPI_CHECK(MPI_Comm_dup(c->requests_comm, world));
    return 0;
}

/* This rank's node: the ranks sharing memory, or those with the same c->node. */
static int split_node(const dp_comm *c, MPI_Comm *node)
{
    if (c->node >= 0)
        DP_MPI_CHECK(MPI_Comm_split(c->requests_comm, c->node, c->rank, node));
    else
        DP_MPI_CHECK(MPI_Comm_split_type(c->requests_comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, node));
    return 0;
}

/* The lowest rank of each node, in c's order. */
static int split_leaders(const dp_comm *c, MPI_Comm *leaders)
{
    MPI_Comm node;
    int status = split_node(c, &node), local_rank = 0;
    if (status)
        return status;
    int got = MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    DP_MPI_CHECK(got);
    DP_MPI_CHECK(MPI_Comm_split(c->requests_comm, local_rank == 0 ? 0 : MPI_UNDEFINED, c->rank, leaders));
    return 0;
}

static int (*const splits[DP_GROUP_KINDS])(const dp_comm *c, MPI_Comm *out) = {split_world, split_node,
                                                                              split_leaders};

int dp_comm_split_group(const dp_comm *c, dp_group group, MPI_Comm *out)
{
    *out = MPI_COMM_NULL;
    if ((unsigned)group >= DP_GROUP_KINDS)
        return dp_fail(DP_EINVAL, "group %d: not world, node or leaders", (int)group);
    int status = splits[group](c, out);
    if (!status && *out != MPI_COMM_NULL)
        DP_MPI_CHECK(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
    return status;
}
