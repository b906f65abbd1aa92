/* The end of a device operation that failed: the handler set by the program, else a report
 * on stderr and MPI_Abort. */
#include "dp/backend.h"

#include "dp/error.h"
#include "src/backend/fatal.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static dp_backend_fatal_fn fatal_handler;

void dp_backend_set_fatal_handler(dp_backend_fatal_fn handler)
{
    fatal_handler = handler;
}

_Noreturn void dp_backend_fatal(void)
{
    if (fatal_handler)
        fatal_handler();
    fprintf(stderr, "dptrain: fatal: %s\n", dp_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}
