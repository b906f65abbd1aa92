#include "dp/atomic_file.h"

#include "dp/error.h"
#include "dp/input_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOST_MAX 256
#define TEMPORARY_MARK ".tmp."

/* --- names: "<path>.tmp.<host>.<pid>", unique per writer even on a shared file system --- */

static void this_host(char host[HOST_MAX])
{
    if (gethostname(host, HOST_MAX) != 0 || !host[0])
        snprintf(host, HOST_MAX, "localhost");
    host[HOST_MAX - 1] = '\0';
}

static char *temporary_path(const char *path)
{
    char host[HOST_MAX];
    this_host(host);
    long pid = (long)getpid();
    int len = snprintf(NULL, 0, "%s" TEMPORARY_MARK "%s.%ld", path, host, pid);
    char *temp_path = dp_alloc((size_t)len + 1, "temporary file name");
    if (temp_path)
        snprintf(temp_path, (size_t)len + 1, "%s" TEMPORARY_MARK "%s.%ld", path, host, pid);
    return temp_path;
}

/* The directory part of path ("." when it has none) in a new string, and where its last
 * component starts. */
static char *directory_of(const char *path, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    size_t len = slash ? (size_t)(slash - path) : 1;
    char *dir = dp_alloc(len + 1, "directory name");
    if (!dir)
        return NULL;
    if (!slash)
        strcpy(dir, ".");
    else if (len == 0)
        strcpy(dir, "/");
    else {
        memcpy(dir, path, len);
        dir[len] = '\0';
    }
    return dir;
}

/* --- stale temporaries --- */

size_t dp_temporary_target_length(const char *name)
{
    const char *dot = strrchr(name, '.'), *mark = NULL;
    if (!dot || !dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1))
        return 0;
    for (const char *at = strstr(name, TEMPORARY_MARK); at && at < dot; at = strstr(at + 1, TEMPORARY_MARK))
        mark = at;
    /* a host between the mark and the pid's dot, and a name before the mark */
    return mark && mark > name && dot > mark + strlen(TEMPORARY_MARK) ? (size_t)(mark - name) : 0;
}

/* If name is "NAME.tmp.<this host>.<pid>", the pid (and NAME's length), else 0. */
static long temporary_owner(const char *name, const char *host, size_t *target_len)
{
    size_t len = dp_temporary_target_length(name);
    if (!len)
        return 0;
    const char *host_at = name + len + strlen(TEMPORARY_MARK), *dot = strrchr(name, '.');
    if ((size_t)(dot - host_at) != strlen(host) || memcmp(host_at, host, strlen(host)) != 0 || strlen(dot + 1) > 9)
        return 0;
    *target_len = len;
    return strtol(dot + 1, NULL, 10);
}

static int process_is_gone(long pid)
{
    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int dp_remove_stale_temporaries(const char *dir, dp_temporary_filter_fn accepts, const void *context)
{
    DIR *d = opendir(dir);
    if (!d)
        return dp_fail(DP_EIO, "%s: cannot read the directory: %s", dir, strerror(errno));
    char host[HOST_MAX];
    this_host(host);
    int removed = 0;
    for (struct dirent *entry; (entry = readdir(d)) != NULL;) {
        size_t target_len = 0;
        long pid = temporary_owner(entry->d_name, host, &target_len);
        if (!pid || target_len == 0 || target_len >= NAME_MAX || !process_is_gone(pid))
            continue;
        char target[NAME_MAX + 1], path[PATH_MAX];
        memcpy(target, entry->d_name, target_len);
        target[target_len] = '\0';
        struct stat st;
        if (!accepts(target, context) ||
            snprintf(path, sizeof path, "%s/%s", dir, entry->d_name) >= (int)sizeof path ||
            lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        removed += unlink(path) == 0;
    }
    closedir(d);
    return removed;
}

static int same_name(const char *name, const void *wanted)
{
    return strcmp(name, wanted) == 0;
}

/* --- removing the temporary when SIGTERM or SIGINT ends the process --- */

static const int cleanup_signals[] = {SIGTERM, SIGINT};
enum { CLEANUP_SIGNALS = sizeof cleanup_signals / sizeof cleanup_signals[0] };

static char pending_temporary[PATH_MAX];
static volatile sig_atomic_t temporary_pending;
static struct sigaction replaced[CLEANUP_SIGNALS];
static int handled[CLEANUP_SIGNALS];

/* SA_RESETHAND has restored the default action on entry; the re-raised signal stays blocked
 * until this returns, then ends the process as it would have without us. */
static void remove_temporary_then_die(int sig)
{
    if (temporary_pending)
        unlink(pending_temporary);
    raise(sig);
}

/* Only where the signal would end the process anyway: a program that ignores or handles it
 * keeps its own behaviour (and dp_remove_stale_temporaries cleans up after a kill -9). */
static void guard_temporary(const char *temp_path)
{
    if (strlen(temp_path) >= sizeof pending_temporary)
        return;
    strcpy(pending_temporary, temp_path);
    temporary_pending = 1;
    struct sigaction cleanup;
    memset(&cleanup, 0, sizeof cleanup);
    cleanup.sa_handler = remove_temporary_then_die;
    cleanup.sa_flags = SA_RESETHAND;
    sigemptyset(&cleanup.sa_mask);
    for (int i = 0; i < CLEANUP_SIGNALS; i++) {
        handled[i] = sigaction(cleanup_signals[i], NULL, &replaced[i]) == 0 &&
                     !(replaced[i].sa_flags & SA_SIGINFO) && replaced[i].sa_handler == SIG_DFL &&
                     sigaction(cleanup_signals[i], &cleanup, NULL) == 0;
    }
}

static void release_temporary(void)
{
    temporary_pending = 0;
    for (int i = 0; i < CLEANUP_SIGNALS; i++)
        if (handled[i])
            sigaction(cleanup_signals[i], &replaced[i], NULL);
}

/* --- writing --- */

static int refuse_non_regular(const char *option, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 0;
    return dp_fail(DP_EIO, "%s%s%s: is %s, not a regular file: refusing to replace it", option,
                   *option ? " " : "", path, dp_file_kind(st.st_mode));
}

static int write_temporary(const char *path, const char *temp_path,
                           dp_write_contents_fn write_contents, const void *context)
{
    int fd = open(temp_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int saved_errno = errno;
        if (fd >= 0)
            close(fd);
        return dp_fail(DP_EIO, "%s: cannot create temporary file %s: %s", path, temp_path,
                       strerror(saved_errno));
    }
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

static void sweep_stale_temporaries_of(const char *path)
{
    const char *base;
    char *dir = directory_of(path, &base);
    if (dir && *base)
        dp_remove_stale_temporaries(dir, same_name, base);
    free(dir);
}

int dp_write_file_atomically(const char *path, dp_write_contents_fn write_contents,
                             const void *context)
{
    int rc = refuse_non_regular("", path);
    if (rc)
        return rc;
    char *temp_path = temporary_path(path);
    if (!temp_path)
        return DP_ENOMEM;
    sweep_stale_temporaries_of(path);
    guard_temporary(temp_path);
    rc = write_temporary(path, temp_path, write_contents, context);
    if (rc == 0 && (rc = refuse_non_regular("", path)) == 0 && rename(temp_path, path) != 0)
        rc = dp_fail(DP_EIO, "%s: cannot rename %s into place: %s", path, temp_path,
                     strerror(errno));
    if (rc)
        unlink(temp_path);
    release_temporary();
    free(temp_path);
    return rc;
}

/* --- start-up checks --- */

/* Creates and removes the temporary the writer would create for target, in dir; messages
 * name option and shown (what the user gave). */
static int probe_creatable(const char *option, const char *shown, const char *dir,
                           const char *target)
{
    char *temp_path = temporary_path(target);
    if (!temp_path)
        return DP_ENOMEM;
    int fd = open(temp_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    int rc = fd >= 0 ? 0
                     : dp_fail(DP_EIO, "%s %s: cannot create files in %s: %s", option, shown, dir,
                               strerror(errno));
    if (fd >= 0) {
        close(fd);
        unlink(temp_path);
    }
    free(temp_path);
    return rc;
}

static int check_directory(const char *option, const char *path, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return dp_fail(DP_EIO, "%s %s: directory %s: %s", option, path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return dp_fail(DP_EIO, "%s %s: %s is %s, not a directory", option, path, dir,
                       dp_file_kind(st.st_mode));
    return 0;
}

int dp_check_output_file(const char *option, const char *path)
{
    const char *base;
    char *dir = directory_of(path, &base);
    if (!dir)
        return DP_ENOMEM;
    int rc = refuse_non_regular(option, path);
    if (!rc && !*base)
        rc = dp_fail(DP_EIO, "%s %s: names a directory, not a file", option, path);
    if (!rc)
        rc = check_directory(option, path, dir);
    if (!rc)
        rc = probe_creatable(option, path, dir, path);
    free(dir);
    return rc;
}

int dp_check_output_dir(const char *option, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return dp_fail(DP_EIO, "%s %s: is %s, not a directory", option, dir,
                           dp_file_kind(st.st_mode));
        char inside[PATH_MAX];
        if (snprintf(inside, sizeof inside, "%s/.dptrain-probe", dir) >= (int)sizeof inside)
            return dp_fail(DP_EIO, "%s %s: path too long", option, dir);
        return probe_creatable(option, dir, dir, inside);
    }
    if (errno != ENOENT)
        return dp_fail(DP_EIO, "%s %s: %s", option, dir, strerror(errno));
    /* Absent: it will be created in its parent, which must exist and take a new entry ("new/"'s
     * parent is ".", not "new"). */
    char trimmed[PATH_MAX];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len >= sizeof trimmed)
        return dp_fail(DP_EIO, "%s %s: path too long", option, dir);
    memcpy(trimmed, dir, len);
    trimmed[len] = '\0';
    const char *base;
    char *parent = directory_of(trimmed, &base);
    if (!parent)
        return DP_ENOMEM;
    int rc = check_directory(option, dir, parent);
    if (!rc)
        rc = probe_creatable(option, dir, parent, trimmed);
    free(parent);
    return rc;
}
