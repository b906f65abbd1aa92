/* --tensorboard DIR: TensorBoard's event file, written by rank 0 in TensorBoard's own format so
 * that its reader (tensorboard --logdir, EventAccumulator) needs nothing of ours. The protocol
 * buffers are a handful of fields, encoded here by hand (tensorflow/core/util/event.proto,
 * summary.proto): Event {double wall_time = 1; int64 step = 2; string file_version = 3;
 * Summary summary = 5}, Summary {repeated Value value = 1}, Value {string tag = 1; float
 * simple_value = 2}. */
#include "src/train/tensorboard.h"

#include "dp/error.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint32_t dp_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0x82f63b78u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

uint32_t dp_crc32c_masked(const void *data, size_t n)
{
    uint32_t crc = dp_crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* A protocol buffer being written: bytes appended up to its room. */
typedef struct proto {
    unsigned char bytes[2048];
    size_t used;
    int overflow;
} proto;

static void put_bytes(proto *p, const void *data, size_t n)
{
    if (p->used + n > sizeof p->bytes) {
        p->overflow = 1;
        return;
    }
    memcpy(p->bytes + p->used, data, n);
    p->used += n;
}

static void put_varint(proto *p, uint64_t v)
{
    unsigned char b[10];
    size_t n = 0;
    do {
        b[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put_bytes(p, b, n);
}

/* Little-endian, as the wire format's fixed64 and fixed32 are. */
static void put_fixed(proto *p, uint64_t v, size_t bytes)
{
    unsigned char b[8];
    for (size_t i = 0; i < bytes; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put_bytes(p, b, bytes);
}

enum { VARINT = 0, FIXED64 = 1, BYTES = 2, FIXED32 = 5 };

static void put_key(proto *p, unsigned field, unsigned wire)
{
    put_varint(p, (uint64_t)(field << 3 | wire));
}

static void put_length_delimited(proto *p, unsigned field, const void *data, size_t n)
{
    put_key(p, field, BYTES);
    put_varint(p, n);
    put_bytes(p, data, n);
}

/* Event's wall_time and step. */
static void put_event_head(proto *p, long step, double wall_time)
{
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits);
    put_key(p, 1, FIXED64);
    put_fixed(p, bits, 8);
    put_key(p, 2, VARINT);
    put_varint(p, (uint64_t)step);
}

/* One TFRecord: length, its masked CRC, the data, the data's masked CRC; flushed whole. */
static int write_record(dp_tensorboard *tb, const proto *p)
{
    unsigned char head[12], tail[4];
    uint64_t length = p->used;
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(length >> (8 * i));
    uint32_t crc = dp_crc32c_masked(head, 8), data_crc = dp_crc32c_masked(p->bytes, p->used);
    for (int i = 0; i < 4; i++) {
        head[8 + i] = (unsigned char)(crc >> (8 * i));
        tail[i] = (unsigned char)(data_crc >> (8 * i));
    }
    if (p->overflow || fwrite(head, 1, sizeof head, tb->file) != sizeof head ||
        fwrite(p->bytes, 1, p->used, tb->file) != p->used || fwrite(tail, 1, sizeof tail, tb->file) != sizeof tail ||
        fflush(tb->file) != 0)
        return dp_fail(DP_EIO, "--tensorboard: cannot write %s: %s", tb->path,
                       p->overflow ? "an event too large" : strerror(errno));
    return 0;
}

/* dir and the directories above it that are missing (runs/NAME, as TensorBoard's users write). */
static int make_directories(const char *dir)
{
    char path[1024];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(path, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

int dp_tensorboard_open(dp_tensorboard *tb, const char *dir, double wall_time)
{
    memset(tb, 0, sizeof *tb);
    struct stat st;
    if (stat(dir, &st) != 0 && make_directories(dir) != 0)
        return dp_fail(DP_EIO, "--tensorboard %s: cannot create the directory: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return dp_fail(DP_EIO, "--tensorboard %s: not a directory", dir);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    if (snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010ld.%s", dir, (long)wall_time, host) >=
        (int)sizeof tb->path)
        return dp_fail(DP_EINVAL, "--tensorboard %s: path too long", dir);
    /* Appended to, never truncated: a second run in the same second keeps the first's events. */
    tb->file = fopen(tb->path, "ab");
    if (!tb->file)
        return dp_fail(DP_EIO, "--tensorboard: cannot create %s: %s", tb->path, strerror(errno));
    proto p = {.used = 0};
    put_event_head(&p, 0, wall_time);
    static const char version[] = "brain.Event:2";
    put_length_delimited(&p, 3, version, sizeof version - 1);
    int status = write_record(tb, &p);
    if (status)
        dp_tensorboard_close(tb);
    return status;
}

void dp_tensorboard_add(dp_tensorboard *tb, const char *tag, double value)
{
    if (!tb->file || tb->count == DP_TENSORBOARD_MAX_VALUES)
        return;
    tb->tags[tb->count] = tag;
    tb->values[tb->count++] = (float)value;
}

int dp_tensorboard_write(dp_tensorboard *tb, long step, double wall_time)
{
    if (!tb->file || !tb->count)
        return 0;
    proto summary = {.used = 0}, event = {.used = 0};
    for (int i = 0; i < tb->count; i++) {
        proto value = {.used = 0};
        uint32_t bits;
        memcpy(&bits, &tb->values[i], sizeof bits);
        put_length_delimited(&value, 1, tb->tags[i], strlen(tb->tags[i]));
        put_key(&value, 2, FIXED32);
        put_fixed(&value, bits, 4);
        put_length_delimited(&summary, 1, value.bytes, value.used);
        summary.overflow |= value.overflow;
    }
    tb->count = 0;
    put_event_head(&event, step, wall_time);
    put_length_delimited(&event, 5, summary.bytes, summary.used);
    event.overflow |= summary.overflow;
    return write_record(tb, &event);
}

int dp_tensorboard_close(dp_tensorboard *tb)
{
    if (!tb->file)
        return 0;
    int failed = ferror(tb->file) | fclose(tb->file);
    tb->file = NULL;
    return failed ? dp_fail(DP_EIO, "--tensorboard: write to %s failed", tb->path) : 0;
}
