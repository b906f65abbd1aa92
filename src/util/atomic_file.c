#include "dp/atomic_file.h"

#include "dp/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "<path>.tmp.<pid>", so concurrent writers of one path never share a temporary. */
static char *temporary_path(const char *path)
{
    long pid = (long)getpid();
    int len = snprintf(NULL, 0, "%s.tmp.%ld", path, pid);
    char *temp_path = dp_alloc((size_t)len + 1, "temporary file name");
    if (temp_path)
        snprintf(temp_path, (size_t)len + 1, "%s.tmp.%ld", path, pid);
    return temp_path;
}

static int write_temporary(const char *path, const char *temp_path,
                           dp_write_contents_fn write_contents, const void *context)
{
    FILE *f = fopen(temp_path, "wb");
    if (!f)
        return dp_fail(DP_EIO, "%s: cannot create temporary file %s: %s", path, temp_path,
                       strerror(errno));
    /* fsync before the rename, or a crash could leave the final name pointing at lost data. */
    int ok = write_contents(f, context) == 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved_errno = errno;
    }
    if (!ok)
        return dp_fail(DP_EIO, "%s: cannot write temporary file %s: %s", path, temp_path,
                       strerror(saved_errno));
    return 0;
}

int dp_write_file_atomically(const char *path, dp_write_contents_fn write_contents,
                             const void *context)
{
    char *temp_path = temporary_path(path);
    if (!temp_path)
        return DP_ENOMEM;
    int rc = write_temporary(path, temp_path, write_contents, context);
    if (rc == 0 && rename(temp_path, path) != 0)
        rc = dp_fail(DP_EIO, "%s: cannot rename %s into place: %s", path, temp_path,
                     strerror(errno));
    if (rc)
        unlink(temp_path);
    free(temp_path);
    return rc;
}
