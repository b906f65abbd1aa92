#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char temp_dir[256];

static void remove_temp_dir(void)
{
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", temp_dir);
    if (system(command) != 0)
        fprintf(stderr, "warning: could not remove %s\n", temp_dir);
}

static const char *test_temp_dir(void)
{
    if (temp_dir[0])
        return temp_dir;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(temp_dir, sizeof temp_dir, "%s/dptrain-test-XXXXXX", base);
    ck_assert_msg(mkdtemp(temp_dir) != NULL, "mkdtemp %s failed", temp_dir);
    atexit(remove_temp_dir);
    return temp_dir;
}

char *dp_test_path(const char *name)
{
    const char *dir = test_temp_dir();
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    ck_assert_ptr_nonnull(path);
    snprintf(path, len, "%s/%s", dir, name);
    return path;
}

char *dp_test_write_file(const char *name, const void *bytes, size_t len, int gzip)
{
    char *path = dp_test_path(name);
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        ck_assert_ptr_nonnull(gz);
        ck_assert_int_eq(gzwrite(gz, bytes, (unsigned)len), (int)len);
        ck_assert_int_eq(gzclose(gz), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
    }
    return path;
}

int dp_test_run_suite(Suite *s)
{
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed;
}
