/* An MPI error code turned into the library's error, for DP_MPI_CHECK (comm.h): used by every
 * file of comm/ and by callers of MPI outside it, so it depends on nothing of comm/. */
#include "dp/comm.h"

#include "dp/error.h"

#include <string.h>

int dp_mpi_fail(int status, const char *call, const char *file, int line)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(status, text, &len) != MPI_SUCCESS)
        strcpy(text, "unknown MPI error");
    return dp_fail(DP_EMPI, "%s failed at %s:%d: %s", call, file, line, text);
}
