/* Whether two paths name one file (same_file.h). */
#include "dp/same_file.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* path's directory (".", "/", or the text before the last slash) into dir; returns the last
 * component. */
static const char *split(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == path)
        snprintf(dir, size, "/");
    else
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
    return slash ? slash + 1 : path;
}

static int same_inode(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int dp_file_in_dir(const char *path, const char *dir)
{
    char parent[PATH_MAX];
    split(path, parent, sizeof parent);
    return same_inode(parent, dir);
}

int dp_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    int a_exists = stat(a, &sa) == 0, b_exists = stat(b, &sb) == 0;
    if (a_exists && b_exists)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (a_exists != b_exists)
        return 0;
    char dir_a[PATH_MAX], dir_b[PATH_MAX];
    const char *name_a = split(a, dir_a, sizeof dir_a), *name_b = split(b, dir_b, sizeof dir_b);
    return strcmp(name_a, name_b) == 0 && same_inode(dir_a, dir_b);
}
