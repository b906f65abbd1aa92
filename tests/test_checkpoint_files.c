/* Files that outlive a run: atomic writes under signals, stale temporaries, output paths
 * checked at start-up, and checkpoint directories (every entry scanned, names zero-padded or
 * not, strict step and run identity, whole-file checksum, pruning only this run's files, the
 * newest complete checkpoint for --resume auto). */
#include "dp/atomic_file.h"
#include "dp/checkpoint.h"
#include "dp/error.h"
#include "tests/testutil.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_A "00000000000000aa"
#define RUN_B "00000000000000bb"

static void assert_failure(int rc, int code, const char *phrase)
{
    ck_assert_int_eq(rc, code);
    ck_assert_msg(strstr(dp_last_error(), phrase) != NULL, "message lacks \"%s\": %s", phrase,
                  dp_last_error());
}

/* A fresh directory inside the test's temporary directory (malloc'd path). */
static char *fresh_dir(const char *name)
{
    char *dir = dp_test_path(name);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    return dir;
}

static int exists(const char *dir, const char *name)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void touch(const char *dir, const char *name)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fclose(f);
}

static void sleep_ms(long ms)
{
    struct timespec pause_for = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause_for, NULL);
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- atomic writes under SIGTERM and SIGINT --- */

/* Writes a little, then waits for the signal the parent sends: a checkpoint write that a
 * SLURM cancel or a Ctrl-C interrupts. */
static int write_then_wait(FILE *f, const void *context)
{
    (void)context;
    if (fputs("partial", f) < 0 || fflush(f) != 0)
        return -1;
    for (;;)
        pause();
}

static void interrupt_a_write(int sig)
{
    char *dir = fresh_dir(sig == SIGTERM ? "sigterm" : "sigint");
    char target[2048];
    snprintf(target, sizeof target, "%s/model.safetensors", dir);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        signal(sig, SIG_DFL);
        dp_write_file_atomically(target, write_then_wait, NULL);
        _exit(0);
    }
    for (int i = 0; i < 500 && dp_test_count_entries(dir, ".tmp.") == 0; i++)
        sleep_ms(10);
    ck_assert_int_eq(dp_test_count_entries(dir, ".tmp."), 1);
    double sent = seconds_now();
    ck_assert_int_eq(kill(child, sig), 0);
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(child, &status, WNOHANG)) == 0 && seconds_now() - sent < 5)
        sleep_ms(10);
    if (done == 0)
        kill(child, SIGKILL);
    ck_assert_msg(done == child, "the writer did not end within 5 s of signal %d", sig);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == sig,
                  "the writer must end by the signal itself (status 0x%x)", status);
    ck_assert_int_eq(dp_test_count_entries(dir, ".tmp."), 0);
    ck_assert(!exists(dir, "model.safetensors"));
    free(dir);
}

START_TEST(a_signal_mid_write_removes_the_temporary_and_still_ends_the_process)
{
    interrupt_a_write(SIGTERM);
    interrupt_a_write(SIGINT);
}
END_TEST

static int write_text(FILE *f, const void *context)
{
    return fputs(context, f) < 0 ? -1 : 0;
}

/* While writing, a signal the program ignores stays ignored (its choice, not ours). */
static int check_still_ignored(FILE *f, const void *context)
{
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    return now.sa_handler == SIG_IGN ? write_text(f, context) : -1;
}

START_TEST(signal_dispositions_are_restored_and_ignored_signals_left_alone)
{
    char *dir = fresh_dir("dispositions");
    char target[2048];
    snprintf(target, sizeof target, "%s/file", dir);
    struct sigaction before, after;
    sigaction(SIGTERM, NULL, &before);
    ck_assert_int_eq(dp_write_file_atomically(target, write_text, "x"), 0);
    sigaction(SIGTERM, NULL, &after);
    ck_assert(after.sa_handler == before.sa_handler);
    signal(SIGTERM, SIG_IGN);
    ck_assert_msg(dp_write_file_atomically(target, check_still_ignored, "y") == 0, "%s",
                  dp_last_error());
    sigaction(SIGTERM, NULL, &after);
    ck_assert(after.sa_handler == SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    free(dir);
}
END_TEST

/* A pid that no longer runs: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(child, NULL, 0), child);
    return child;
}

START_TEST(stale_temporaries_of_dead_writers_on_this_host_are_swept)
{
    char *dir = fresh_dir("stale");
    char host[256] = "";
    gethostname(host, sizeof host);
    char dead[400], live[400], other_host[400], other_target[400], target[2048];
    pid_t gone = dead_pid();
    snprintf(dead, sizeof dead, "model.st.tmp.%s.%ld", host, (long)gone);
    snprintf(live, sizeof live, "model.st.tmp.%s.%ld", host, (long)getppid());
    snprintf(other_host, sizeof other_host, "model.st.tmp.%s-elsewhere.%ld", host, (long)gone);
    snprintf(other_target, sizeof other_target, "notes.txt.tmp.%s.%ld", host, (long)gone);
    touch(dir, dead);
    touch(dir, live);
    touch(dir, other_host);
    touch(dir, other_target);
    snprintf(target, sizeof target, "%s/model.st", dir);
    ck_assert_int_eq(dp_write_file_atomically(target, write_text, "z"), 0);
    ck_assert_msg(!exists(dir, dead), "the dead writer's temporary was left");
    ck_assert_msg(exists(dir, live), "a live process's temporary was removed");
    ck_assert_msg(exists(dir, other_host), "another host's temporary was removed");
    ck_assert_msg(exists(dir, other_target), "another file's temporary was removed");
    /* A checkpoint directory is swept of every step file's stale temporaries at start-up. */
    char step_temp[400];
    snprintf(step_temp, sizeof step_temp, "step-000000500.safetensors.tmp.%s.%ld", host, (long)gone);
    touch(dir, step_temp);
    long later = 0;
    ck_assert_msg(dp_checkpoint_claim_dir(dir, RUN_A, 0, &later) == 0, "%s", dp_last_error());
    ck_assert(!exists(dir, step_temp));
    ck_assert(exists(dir, other_target));
    /* So an output may not take such a name there: any host's temporary of a step file is the directory's. */
    ck_assert(dp_checkpoint_dir_owns(step_temp));
    ck_assert(dp_checkpoint_dir_owns("d/step-3.rank-1-of-2.safetensors.tmp.node.a.b.7"));
    ck_assert(dp_checkpoint_dir_owns("step-3.safetensors"));
    ck_assert(!dp_checkpoint_dir_owns("step-3.safetensors.tmp.node.x7"));
    ck_assert(!dp_checkpoint_dir_owns("step-3.safetensors.tmp..7"));
    ck_assert(!dp_checkpoint_dir_owns(other_target));
    ck_assert_uint_eq(dp_temporary_target_length("m.tmp.x.tmp.h.9"), strlen("m.tmp.x"));
    ck_assert_uint_eq(dp_temporary_target_length(".tmp.h.9"), 0);
    free(dir);
}
END_TEST

/* --- output paths checked before training --- */

START_TEST(output_paths_are_checked_before_anything_is_written)
{
    char *dir = fresh_dir("outputs");
    char path[2048];
    snprintf(path, sizeof path, "%s/missing/model.st", dir);
    assert_failure(dp_check_output_file("--save", path), DP_EIO, "--save");
    ck_assert_msg(strstr(dp_last_error(), "No such file or directory"), "%s", dp_last_error());
    touch(dir, "plain");
    snprintf(path, sizeof path, "%s/plain/model.st", dir);
    assert_failure(dp_check_output_file("--save", path), DP_EIO, "is a regular file, not a directory");
    snprintf(path, sizeof path, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    assert_failure(dp_check_output_file("--save", path), DP_EIO, "is a FIFO (named pipe), not a regular file");
    snprintf(path, sizeof path, "%s/", dir);
    assert_failure(dp_check_output_file("--save", path), DP_EIO, "is a directory");
    snprintf(path, sizeof path, "%s/new.st", dir);
    ck_assert_msg(dp_check_output_file("--save", path) == 0, "%s", dp_last_error());
    ck_assert(!exists(dir, "new.st"));
    ck_assert_int_eq(dp_test_count_entries(dir, ".tmp."), 0);

    snprintf(path, sizeof path, "%s/plain", dir);
    assert_failure(dp_check_output_dir("--checkpoint-dir", path), DP_EIO, "is a regular file, not a directory");
    snprintf(path, sizeof path, "%s/missing/ckpt", dir);
    assert_failure(dp_check_output_dir("--checkpoint-dir", path), DP_EIO, "No such file or directory");
    snprintf(path, sizeof path, "%s/ckpt", dir);
    ck_assert_msg(dp_check_output_dir("--checkpoint-dir", path) == 0, "%s", dp_last_error());
    ck_assert(!exists(dir, "ckpt"));
    ck_assert_msg(dp_check_output_dir("--checkpoint-dir", dir) == 0, "%s", dp_last_error());
    ck_assert_int_eq(dp_test_count_entries(dir, ".tmp."), 0);
    /* Root writes anywhere: a read-only directory stops only other users. */
    if (geteuid() != 0) {
        char ro[1024];
        snprintf(ro, sizeof ro, "%s/read-only", dir);
        ck_assert_int_eq(mkdir(ro, 0500), 0);
        snprintf(path, sizeof path, "%s/model.st", ro);
        assert_failure(dp_check_output_file("--save", path), DP_EIO, "cannot create files in");
    }
    free(dir);
}
END_TEST

/* --- checkpoint directories --- */

/* A one-tensor checkpoint of step written by run run_id. */
static int save_step(const char *dir, long step, const char *run_id, long keep)
{
    float w[3] = {(float)step, 1.0f, -1.0f};
    dp_tensor_ref ref = {.name = "w", .ndim = 1, .shape = {3}, .data = w};
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%ld", step);
    const char *const keys[] = {"step", "run_id"}, *const values[] = {step_text, run_id};
    return dp_checkpoint_save(dir, step, &ref, 1, keys, values, 2, keep);
}

static void assert_newest(const char *dir, const char *name)
{
    char path[2048], skipped[1024];
    ck_assert_msg(dp_checkpoint_find(dir, path, sizeof path, skipped, sizeof skipped) == 0, "%s", dp_last_error());
    ck_assert_str_eq(strrchr(path, '/') + 1, name);
}

START_TEST(every_directory_entry_is_scanned)
{
    char *dir = fresh_dir("many");
    /* The newest first: filesystems that list recent entries last would hide it from a
     * scan that stops early. Only the newest is read, so the others may be empty. */
    ck_assert_msg(save_step(dir, 20000, RUN_A, 1) == 0, "%s", dp_last_error());
    for (int step = 1; step < 20000; step++) {
        char name[64];
        snprintf(name, sizeof name, "step-%09d.safetensors", step);
        touch(dir, name);
    }
    assert_newest(dir, "step-000020000.safetensors");
    free(dir);
}
END_TEST

START_TEST(names_need_not_be_zero_padded)
{
    char *dir = fresh_dir("unpadded");
    ck_assert_int_eq(save_step(dir, 10, RUN_A, 5), 0);
    ck_assert_int_eq(save_step(dir, 20, RUN_A, 5), 0);
    char from[2048], to[2048];
    snprintf(from, sizeof from, "%s/step-000000020.safetensors", dir);
    snprintf(to, sizeof to, "%s/step-20.safetensors", dir);
    ck_assert_int_eq(rename(from, to), 0);
    assert_newest(dir, "step-20.safetensors");
    dp_meta meta = {.key = "step"};
    ck_assert_msg(dp_checkpoint_read_metadata(to, &meta, 1) == 0, "%s", dp_last_error());
    ck_assert_str_eq(meta.value, "20");
    /* Pruning deletes it by its own name. */
    ck_assert_msg(save_step(dir, 30, RUN_A, 1) == 0, "%s", dp_last_error());
    ck_assert(!exists(dir, "step-20.safetensors"));
    ck_assert(!exists(dir, "step-000000010.safetensors"));
    ck_assert(exists(dir, "step-000000030.safetensors"));
    /* Names that only look similar are not checkpoints. */
    touch(dir, "step-+40.safetensors");
    touch(dir, "step- 50.safetensors");
    touch(dir, "step-60.safetensors.bak");
    assert_newest(dir, "step-000000030.safetensors");
    free(dir);
}
END_TEST

START_TEST(a_run_prunes_and_overwrites_only_its_own_checkpoints)
{
    char *dir = fresh_dir("two-runs");
    for (long step = 10; step <= 40; step += 10)
        ck_assert_int_eq(save_step(dir, step, RUN_A, 10), 0);
    /* B's checkpoints are older by step number: --keep must not count or delete A's. */
    ck_assert_msg(save_step(dir, 5, RUN_B, 1) == 0, "%s", dp_last_error());
    ck_assert_msg(save_step(dir, 7, RUN_B, 1) == 0, "%s", dp_last_error());
    ck_assert(!exists(dir, "step-000000005.safetensors"));
    ck_assert(exists(dir, "step-000000007.safetensors"));
    ck_assert_int_eq(dp_test_count_entries(dir, "step-0000000"), 5);
    assert_failure(save_step(dir, 20, RUN_B, 1), DP_EIO, "a checkpoint of another run");
    ck_assert(exists(dir, "step-000000020.safetensors"));
    long later = 0;
    assert_failure(dp_checkpoint_claim_dir(dir, RUN_B, 0, &later), DP_EIO, "of another run");
    ck_assert_msg(strstr(dp_last_error(), "--resume"), "%s", dp_last_error());
    /* A's own resumed run: told that checkpoints beyond its start will be replaced. */
    char *only_a = fresh_dir("one-run");
    for (long step = 10; step <= 30; step += 10)
        ck_assert_int_eq(save_step(only_a, step, RUN_A, 10), 0);
    ck_assert_msg(dp_checkpoint_claim_dir(only_a, RUN_A, 10, &later) == 0, "%s", dp_last_error());
    ck_assert_int_eq(later, 30);
    /* One no resume would read (a crash's leftover, a copy cut short) is warned of, not refused:
     * --resume passes over it too, so refusing it would stop the very run that resumes. */
    touch(only_a, "step-000000099.safetensors");
    ck_assert_msg(dp_checkpoint_claim_dir(only_a, RUN_A, 10, &later) == 0, "%s", dp_last_error());
    ck_assert_int_eq(later, 30);
    ck_assert(exists(only_a, "step-000000099.safetensors"));
    free(only_a);
    free(dir);
}
END_TEST

static void write_raw_checkpoint(const char *path, const char *step, const char *run_id)
{
    float w[3] = {0};
    dp_tensor_ref ref = {.name = "w", .ndim = 1, .shape = {3}, .data = w};
    const char *const keys[] = {"step", "run_id"}, *const values[] = {step, run_id};
    ck_assert_int_eq(dp_safetensors_write_with_crc(path, &ref, 1, keys, values, 2, "checksum"), 0);
}

START_TEST(metadata_is_checksummed_and_parsed_strictly)
{
    char *dir = fresh_dir("strict");
    dp_meta meta = {.key = "step"};
    char path[2048];
    snprintf(path, sizeof path, "%s/step-000000020.safetensors", dir);
    write_raw_checkpoint(path, "2x", RUN_A);
    assert_failure(dp_checkpoint_read_metadata(path, &meta, 1), DP_EFORMAT, "step '2x' is not a whole number");
    write_raw_checkpoint(path, "20", "not-hex");
    assert_failure(dp_checkpoint_read_metadata(path, &meta, 1), DP_EFORMAT, "run_id 'not-hex'");
    snprintf(path, sizeof path, "%s/step-000000030.safetensors", dir);
    write_raw_checkpoint(path, "20", RUN_A);
    assert_failure(dp_checkpoint_read_metadata(path, &meta, 1), DP_EFORMAT,
                   "the file name says step 30 but the checkpoint holds step 20");
    snprintf(path, sizeof path, "%s/best.safetensors", dir); /* any other name: no name check */
    write_raw_checkpoint(path, "20", RUN_A);
    ck_assert_msg(dp_checkpoint_read_metadata(path, &meta, 1) == 0, "%s", dp_last_error());

    /* One changed digit of the step: the checksum covers the metadata too. */
    snprintf(path, sizeof path, "%s/step-000000020.safetensors", dir);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_msg(save_step(dir, 20, RUN_A, 5) == 0, "%s", dp_last_error());
    FILE *f = fopen(path, "r+b");
    char head[512] = "";
    ck_assert_uint_gt(fread(head, 1, sizeof head - 1, f), 0);
    char *digit = strstr(head + 8, "\"step\":\"20\""); /* past the binary length prefix */
    ck_assert_ptr_nonnull(digit);
    ck_assert_int_eq(fseek(f, digit - head + 9, SEEK_SET), 0);
    ck_assert_int_ne(fputc('8', f), EOF);
    fclose(f);
    assert_failure(dp_checkpoint_read_metadata(path, &meta, 1), DP_EFORMAT, "checksum mismatch");

    /* A --save file, and a checkpoint whose checksum covered only the data. */
    float w[3] = {0};
    dp_tensor_ref ref = {.name = "w", .ndim = 1, .shape = {3}, .data = w};
    const char *const keys[] = {"step", "run_id", "checksum"};
    const char *const values[] = {"20", RUN_A, "crc32:12345678"};
    snprintf(path, sizeof path, "%s/saved.safetensors", dir);
    ck_assert_int_eq(dp_safetensors_write(path, &ref, 1, keys, values, 2), 0);
    assert_failure(dp_checkpoint_read_metadata(path, &meta, 1), DP_EFORMAT, "not a dptrain checkpoint");
    ck_assert_int_eq(dp_safetensors_write(path, &ref, 1, keys, values, 3), 0);
    assert_failure(dp_checkpoint_read_metadata(path, &meta, 1), DP_EFORMAT, "covers only the tensor data");

    /* A FIFO among the checkpoints is refused at once, never opened for a blocking read. */
    snprintf(path, sizeof path, "%s/step-000000090.safetensors", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    char found[2048], skipped[1024];
    assert_failure(dp_checkpoint_read_metadata(path, &meta, 1), DP_EIO, "is a FIFO");
    assert_failure(dp_checkpoint_find(path, found, sizeof found, skipped, sizeof skipped), DP_EIO, "is a FIFO");
    /* The directory's newest complete checkpoint passes over it (and the damaged ones), naming it. */
    ck_assert_msg(save_step(dir, 40, RUN_A, 5) == 0, "%s", dp_last_error());
    ck_assert_msg(dp_checkpoint_find(dir, found, sizeof found, skipped, sizeof skipped) == 0, "%s", dp_last_error());
    ck_assert_ptr_nonnull(strstr(found, "step-000000040.safetensors"));
    ck_assert_ptr_nonnull(strstr(skipped, "step-000000090.safetensors"));
    free(dir);
}
END_TEST

/* An index of step with `world` shards, and the shards whose bit is set in `present`. */
static void save_sharded_step(const char *dir, long step, int world, unsigned present)
{
    float w[3] = {(float)step, 2.0f, -2.0f};
    dp_tensor_ref ref = {.name = "w", .ndim = 1, .shape = {3}, .data = w};
    char step_text[32], world_text[16];
    snprintf(step_text, sizeof step_text, "%ld", step);
    snprintf(world_text, sizeof world_text, "%d", world);
    const char *const keys[] = {"step", "run_id", DP_CHECKPOINT_SHARDS_KEY};
    const char *const values[] = {step_text, RUN_A, world_text};
    for (int rank = 0; rank < world; rank++)
        if (present & (1u << rank))
            ck_assert_int_eq(dp_checkpoint_save_shard(dir, step, rank, world, &ref, 1, keys, values, 2), 0);
    ck_assert_int_eq(dp_checkpoint_save(dir, step, &ref, 1, keys, values, 3, 100), 0);
}

static void assert_complete(const char *dir, const char *name, const char *skipped_phrase)
{
    char path[2048], skipped[2048];
    ck_assert_msg(dp_checkpoint_find_complete(dir, path, sizeof path, skipped, sizeof skipped) == 0, "%s",
                  dp_last_error());
    ck_assert_str_eq(path[0] ? strrchr(path, '/') + 1 : "", name);
    ck_assert_msg(skipped_phrase ? strstr(skipped, skipped_phrase) != NULL : !skipped[0],
                  "skipped: '%s', want '%s'", skipped, skipped_phrase ? skipped_phrase : "");
}

START_TEST(resume_auto_finds_the_newest_complete_checkpoint)
{
    char *dir = dp_test_path("auto");
    assert_complete(dir, "", NULL); /* missing directory: a fresh start */
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    assert_complete(dir, "", NULL);
    ck_assert_int_eq(save_step(dir, 10, RUN_A, 100), 0);
    save_sharded_step(dir, 20, 3, 7u);
    assert_complete(dir, "step-000000020.safetensors", NULL);
    /* A shard missing, then a shard corrupt: the index is passed over, naming why. */
    save_sharded_step(dir, 30, 3, 5u);
    assert_complete(dir, "step-000000020.safetensors", "step-000000030.safetensors (");
    char path[2048];
    snprintf(path, sizeof path, "%s/step-000000030.rank-1-of-3.safetensors", dir);
    save_sharded_step(dir, 30, 3, 7u);
    FILE *f = fopen(path, "r+b");
    ck_assert_int_eq(fseek(f, -2, SEEK_END), 0);
    ck_assert_int_ne(fputc(0x5a, f), EOF);
    fclose(f);
    assert_complete(dir, "step-000000020.safetensors", "checksum mismatch");
    /* A whole file with one flipped byte, and one that is empty: passed over too. */
    ck_assert_int_eq(save_step(dir, 40, RUN_A, 100), 0);
    snprintf(path, sizeof path, "%s/step-000000040.safetensors", dir);
    f = fopen(path, "r+b");
    ck_assert_int_eq(fseek(f, -2, SEEK_END), 0);
    ck_assert_int_ne(fputc(0x5a, f), EOF);
    fclose(f);
    touch(dir, "step-000000050.safetensors");
    assert_complete(dir, "step-000000020.safetensors", "step-000000050.safetensors (");
    assert_complete(dir, "step-000000020.safetensors", "step-000000040.safetensors (");
    /* Nothing complete at all: a fresh start, every file named. */
    char *bad = fresh_dir("auto-bad");
    touch(bad, "step-000000001.safetensors");
    assert_complete(bad, "", "step-000000001.safetensors (");
    free(bad);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoint files");
    TCase *writes = tcase_create("atomic writes and output paths");
    tcase_add_test(writes, a_signal_mid_write_removes_the_temporary_and_still_ends_the_process);
    tcase_add_test(writes, signal_dispositions_are_restored_and_ignored_signals_left_alone);
    tcase_add_test(writes, stale_temporaries_of_dead_writers_on_this_host_are_swept);
    tcase_add_test(writes, output_paths_are_checked_before_anything_is_written);
    suite_add_tcase(s, writes);
    TCase *dirs = tcase_create("checkpoint directories");
    tcase_set_timeout(dirs, 60);
    tcase_add_test(dirs, every_directory_entry_is_scanned);
    tcase_add_test(dirs, names_need_not_be_zero_padded);
    tcase_add_test(dirs, a_run_prunes_and_overwrites_only_its_own_checkpoints);
    tcase_add_test(dirs, metadata_is_checksummed_and_parsed_strictly);
    tcase_add_test(dirs, resume_auto_finds_the_newest_complete_checkpoint);
    suite_add_tcase(s, dirs);
    return dp_test_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
