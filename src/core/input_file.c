#include "dp/input_file.h"

#include "dp/error.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *dp_file_kind(mode_t mode)
{
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO (named pipe)"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISLNK(mode)  ? "a symbolic link"
                            : "not a regular file";
}

static int refuse(const char *path, mode_t mode)
{
    return dp_fail(DP_EIO, "%s: is %s, not a regular file: refusing to read it (it could block "
                   "or never end)", path, dp_file_kind(mode));
}

int dp_open_input_fd(const char *path, int *fd)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return dp_fail(DP_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return refuse(path, st.st_mode);
    /* Non-blocking: had the file become a FIFO since the stat, open() would not wait for a writer. */
    int opened = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (opened < 0)
        return dp_fail(DP_EIO, "%s: cannot open: %s", path, strerror(errno));
    int status = 0;
    if (fstat(opened, &st) != 0)
        status = dp_fail(DP_EIO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        status = refuse(path, st.st_mode);
    else if (fcntl(opened, F_SETFL, fcntl(opened, F_GETFL) & ~O_NONBLOCK) != 0)
        status = dp_fail(DP_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (status) {
        close(opened);
        return status;
    }
    *fd = opened;
    return 0;
}

int dp_open_input(const char *path, FILE **f)
{
    int fd = -1;
    int status = dp_open_input_fd(path, &fd);
    if (status)
        return status;
    *f = fdopen(fd, "rb");
    if (!*f) {
        status = dp_fail(DP_EIO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return status;
}
