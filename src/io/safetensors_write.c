#include "dp/safetensors.h"

#include "dp/atomic_file.h"
#include "dp/error.h"
#include "src/io/safetensors_format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_ALIGN 8

static const char METADATA_KEY[] = "__metadata__";

/* What one file holds: the tensors and the "__metadata__" string pairs. */
typedef struct st_contents {
    const dp_tensor_ref *tensors;
    int count;
    const char *const *meta_keys;
    const char *const *meta_values;
    int meta_count;
    const char *crc_key;            /* NULL, or the metadata key that gets the file's CRC */
    dp_tensor_fill_fn fill;         /* NULL, or where tensors without data come from (no CRC then) */
    void *fill_arg;
    size_t piece;                   /* the most elements asked of fill at once */
} st_contents;

static void encode_u64le(uint64_t value, unsigned char out[ST_PREFIX_BYTES])
{
    for (int i = 0; i < ST_PREFIX_BYTES; i++)
        out[i] = (unsigned char)(value >> (8 * i));
}

/* A file with duplicate keys, or a tensor posing as the metadata, is not valid safetensors. */
static int check_write_arguments(const char *path, const st_contents *c)
{
    int rc = st_check_tensor_refs(path, c->tensors, c->count);
    for (int i = 0; c->fill && rc == DP_EINVAL && i < c->count; i++) /* streamed: data may be NULL */
        rc = st_check_tensor_ref(path, &c->tensors[i], i, 0);
    if (rc)
        return rc;
    if (c->meta_count < 0 || (c->meta_count > 0 && (!c->meta_keys || !c->meta_values)))
        return dp_fail(DP_EINVAL, "%s: invalid metadata list (count %d)", path, c->meta_count);
    for (int i = 0; i < c->meta_count; i++) {
        if (!c->meta_keys[i] || !c->meta_values[i])
            return dp_fail(DP_EINVAL, "%s: metadata entry %d is NULL", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(c->meta_keys[i], c->meta_keys[j]) == 0)
                return dp_fail(DP_EINVAL, "%s: duplicate metadata key '%s'", path, c->meta_keys[i]);
        if (c->crc_key && strcmp(c->meta_keys[i], c->crc_key) == 0)
            return dp_fail(DP_EINVAL, "%s: metadata key '%s' is reserved for the checksum", path,
                           c->crc_key);
    }
    for (int i = 0; i < c->count; i++) {
        const char *name = c->tensors[i].name;
        if (strcmp(name, METADATA_KEY) == 0)
            return dp_fail(DP_EINVAL, "%s: tensor name '%s' is reserved", path, name);
        for (int j = 0; j < i; j++)
            if (strcmp(name, c->tensors[j].name) == 0)
                return dp_fail(DP_EINVAL, "%s: duplicate tensor name '%s'", path, name);
    }
    return 0;
}

/* --- header writer --- */

/* Appends text to out, or with out NULL only counts it, so one routine both sizes and fills. */
typedef struct text_sink {
    char *out;
    size_t len;
    size_t crc_at;  /* where the checksum's hex digits go */
} text_sink;

static void put_bytes(text_sink *s, const char *bytes, size_t n)
{
    if (s->out)
        memcpy(s->out + s->len, bytes, n);
    s->len += n;
}

static void put_text(text_sink *s, const char *text)
{
    put_bytes(s, text, strlen(text));
}

static void put_int(text_sink *s, int64_t value)
{
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%" PRId64, value);
    put_bytes(s, digits, (size_t)n);
}

/* Escapes exactly as serde_json does, so our headers match the reference byte for byte. */
static void put_json_string(text_sink *s, const char *text)
{
    put_text(s, "\"");
    for (const char *p = text; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        switch (ch) {
        case '"': put_text(s, "\\\""); break;
        case '\\': put_text(s, "\\\\"); break;
        case '\b': put_text(s, "\\b"); break;
        case '\f': put_text(s, "\\f"); break;
        case '\n': put_text(s, "\\n"); break;
        case '\r': put_text(s, "\\r"); break;
        case '\t': put_text(s, "\\t"); break;
        default:
            if (ch < 0x20) {
                char escape[8];
                snprintf(escape, sizeof escape, "\\u%04x", ch);
                put_text(s, escape);
            } else {
                put_bytes(s, p, 1);
            }
        }
    }
    put_text(s, "\"");
}

static void put_metadata(text_sink *s, const st_contents *c)
{
    put_json_string(s, METADATA_KEY);
    put_text(s, ":{");
    for (int i = 0; i < c->meta_count; i++) {
        if (i > 0)
            put_text(s, ",");
        put_json_string(s, c->meta_keys[i]);
        put_text(s, ":");
        put_json_string(s, c->meta_values[i]);
    }
    if (c->crc_key) {
        if (c->meta_count > 0)
            put_text(s, ",");
        put_json_string(s, c->crc_key);
        put_text(s, ":\"" DP_SAFETENSORS_CRC_PREFIX);
        s->crc_at = s->len;
        put_text(s, ST_CRC_BLANK "\"");
    }
    put_text(s, "}");
}

static void put_tensor_entry(text_sink *s, const dp_tensor_ref *t, int64_t begin)
{
    put_json_string(s, t->name);
    put_text(s, ":{\"dtype\":\"");
    put_text(s, dp_dtype_name(t->dtype));
    put_text(s, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
        if (d > 0)
            put_text(s, ",");
        put_int(s, t->shape[d]);
    }
    put_text(s, "],\"data_offsets\":[");
    put_int(s, begin);
    put_text(s, ",");
    put_int(s, begin + dp_tensor_bytes(t));
    put_text(s, "]}");
}

static void put_header(text_sink *s, const st_contents *c)
{
    int has_metadata = c->meta_count > 0 || c->crc_key;
    put_text(s, "{");
    if (has_metadata)
        put_metadata(s, c);
    int64_t offset = 0;
    for (int i = 0; i < c->count; i++) {
        if (i > 0 || has_metadata)
            put_text(s, ",");
        put_tensor_entry(s, &c->tensors[i], offset);
        offset += dp_tensor_bytes(&c->tensors[i]);
    }
    put_text(s, "}");
}

/* Space padding keeps the data section 8-byte aligned, as the reference implementation does.
 * *crc_at is where the checksum's digits lie. Returns NULL (after dp_fail) when out of memory. */
static char *build_header(const st_contents *c, size_t *padded_len, size_t *crc_at)
{
    text_sink measure = {NULL, 0, 0};
    put_header(&measure, c);
    size_t padded = (measure.len + HEADER_ALIGN - 1) / HEADER_ALIGN * HEADER_ALIGN;
    text_sink sink = {dp_alloc(padded, "safetensors header"), 0, 0};
    if (!sink.out)
        return NULL;
    put_header(&sink, c);
    memset(sink.out + sink.len, ' ', padded - sink.len);
    *padded_len = padded;
    *crc_at = sink.crc_at;
    return sink.out;
}

/* --- the file's own CRC-32 --- */

/* CRC of the prefix and header as written (digits still blank) and every tensor's data. */
static unsigned long contents_crc(const unsigned char prefix[ST_PREFIX_BYTES], const char *header,
                          size_t header_len, const st_contents *c)
{
    unsigned long crc = st_crc_update(st_crc_start(), prefix, ST_PREFIX_BYTES);
    crc = st_crc_update(crc, header, header_len);
    for (int i = 0; i < c->count; i++)
        crc = st_crc_update(crc, c->tensors[i].data, (size_t)dp_tensor_bytes(&c->tensors[i]));
    return crc;
}

static void fill_crc(char *header, size_t header_len, size_t crc_at, const st_contents *c)
{
    unsigned char prefix[ST_PREFIX_BYTES];
    encode_u64le(header_len, prefix);
    char digits[ST_CRC_DIGITS + 1];
    snprintf(digits, sizeof digits, "%08lx", contents_crc(prefix, header, header_len, c));
    memcpy(header + crc_at, digits, ST_CRC_DIGITS);
}

/* --- file writing --- */

/* What one write puts in the file: the length prefix and padded header, then the data. */
typedef struct st_file {
    const char *header;
    size_t header_len;
    const st_contents *contents;
    int fill_status;                /* fill's error, its message kept */
    char fill_error[512];
} st_file;

/* Tensor t's data asked of fill piece by piece, each written before the next. */
static int write_filled(FILE *f, st_file *file, int t)
{
    const st_contents *c = file->contents;
    size_t element = dp_dtype_size(c->tensors[t].dtype), n = (size_t)dp_tensor_numel(&c->tensors[t]);
    size_t piece = c->piece < n ? c->piece : n;
    void *buf = dp_alloc((piece ? piece : 1) * element, "a piece of a streamed tensor");
    int rc = buf ? 0 : DP_ENOMEM, wrote = 1;
    for (size_t first = 0; !rc && wrote && first < n; first += piece) {
        size_t count = n - first < piece ? n - first : piece;
        rc = c->fill(c->fill_arg, t, first, count, buf);
        wrote = rc || fwrite(buf, element, count, f) == count; /* fwrite sets errno */
    }
    if (rc) {
        file->fill_status = rc;
        snprintf(file->fill_error, sizeof file->fill_error, "%s", dp_last_error());
        errno = EIO;
    }
    free(buf);
    return rc || !wrote ? -1 : 0;
}

static int write_contents(FILE *f, const void *context)
{
    st_file *file = (st_file *)context;
    const st_contents *c = file->contents;
    unsigned char prefix[ST_PREFIX_BYTES];
    encode_u64le(file->header_len, prefix);
    if (fwrite(prefix, 1, sizeof prefix, f) != sizeof prefix ||
        fwrite(file->header, 1, file->header_len, f) != file->header_len)
        return -1;
    for (int i = 0; i < c->count; i++) {
        size_t n = (size_t)dp_tensor_bytes(&c->tensors[i]);
        if (c->fill && !c->tensors[i].data && n > 0) {
            if (write_filled(f, file, i))
                return -1;
        } else if (n > 0 && fwrite(c->tensors[i].data, 1, n, f) != n) {
            return -1;
        }
    }
    return 0;
}

static int write_file(const char *path, const st_contents *contents)
{
    int rc = check_write_arguments(path, contents);
    if (rc)
        return rc;
    size_t header_len = 0, crc_at = 0;
    char *header = build_header(contents, &header_len, &crc_at);
    if (!header)
        return DP_ENOMEM;
    if (contents->crc_key)
        fill_crc(header, header_len, crc_at, contents);
    st_file file = {header, header_len, contents, 0, ""};
    rc = dp_write_file_atomically(path, write_contents, &file);
    free(header);
    return file.fill_status ? dp_fail(file.fill_status, "%s: %s", path, file.fill_error) : rc;
}

int dp_safetensors_write(const char *path, const dp_tensor_ref *tensors, int count,
                         const char *const *meta_keys, const char *const *meta_values,
                         int meta_count)
{
    const st_contents contents = {tensors, count, meta_keys, meta_values, meta_count, NULL, NULL, NULL, 0};
    return write_file(path, &contents);
}

int dp_safetensors_write_with_crc(const char *path, const dp_tensor_ref *tensors, int count,
                                  const char *const *meta_keys, const char *const *meta_values,
                                  int meta_count, const char *crc_key)
{
    const st_contents contents = {tensors, count, meta_keys, meta_values, meta_count, crc_key, NULL, NULL, 0};
    return write_file(path, &contents);
}

int dp_safetensors_write_streamed(const char *path, const dp_tensor_ref *tensors, int count,
                                  const char *const *meta_keys, const char *const *meta_values,
                                  int meta_count, dp_tensor_fill_fn fill, void *arg, size_t piece)
{
    if (!fill || !piece)
        return dp_fail(DP_EINVAL, "%s: a streamed write needs a fill function and a piece size", path);
    const st_contents contents = {tensors, count, meta_keys, meta_values, meta_count, NULL, fill, arg, piece};
    return write_file(path, &contents);
}

