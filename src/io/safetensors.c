#include "dp/safetensors.h"

#include "dp/atomic_file.h"
#include "dp/error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Tensor bytes go to and from disk unconverted, and the format is little-endian float32. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors I/O assumes a little-endian host"
#endif
_Static_assert(sizeof(float) == 4, "safetensors F32 needs a 4-byte float");

#define PREFIX_BYTES 8
#define HEADER_ALIGN 8
/* The reference implementation's limit; it also caps what a corrupt prefix makes us allocate. */
#define MAX_HEADER_BYTES 100000000u
#define JSON_MAX_DEPTH 64
#define SHAPE_TEXT_MAX (DP_TENSOR_MAX_DIMS * 22 + 3)

static const char METADATA_KEY[] = "__metadata__";

/* What one checkpoint file holds: the tensors and the "__metadata__" string pairs. */
typedef struct st_contents {
    const dp_tensor_ref *tensors;
    int count;
    const char *const *meta_keys;
    const char *const *meta_values;
    int meta_count;
} st_contents;

static void encode_u64le(uint64_t value, unsigned char out[PREFIX_BYTES])
{
    for (int i = 0; i < PREFIX_BYTES; i++)
        out[i] = (unsigned char)(value >> (8 * i));
}

static uint64_t decode_u64le(const unsigned char in[PREFIX_BYTES])
{
    uint64_t value = 0;
    for (int i = 0; i < PREFIX_BYTES; i++)
        value |= (uint64_t)in[i] << (8 * i);
    return value;
}

static int64_t tensor_bytes(const dp_tensor_ref *t)
{
    return dp_tensor_numel(t) * (int64_t)sizeof(float);
}

/* Shape and name sanity for caller-supplied tensors, so offsets and messages stay well defined. */
static int check_tensor_refs(const char *path, const dp_tensor_ref *tensors, int count)
{
    if (count < 0 || (count > 0 && !tensors))
        return dp_fail(DP_EINVAL, "%s: invalid tensor list (count %d)", path, count);
    for (int i = 0; i < count; i++) {
        const dp_tensor_ref *t = &tensors[i];
        if (!memchr(t->name, '\0', sizeof t->name))
            return dp_fail(DP_EINVAL, "%s: tensor %d has an unterminated name", path, i);
        if (t->ndim < 0 || t->ndim > DP_TENSOR_MAX_DIMS)
            return dp_fail(DP_EINVAL, "%s: tensor '%s' has %d dimensions (at most %d supported)",
                           path, t->name, t->ndim, DP_TENSOR_MAX_DIMS);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0)
                return dp_fail(DP_EINVAL, "%s: tensor '%s' has a negative dimension", path,
                               t->name);
        if (dp_tensor_numel(t) > 0 && !t->data)
            return dp_fail(DP_EINVAL, "%s: tensor '%s' has no data", path, t->name);
    }
    return 0;
}

/* A file with duplicate keys, or a tensor posing as the metadata, is not valid safetensors. */
static int check_write_arguments(const char *path, const st_contents *c)
{
    int rc = check_tensor_refs(path, c->tensors, c->count);
    if (rc)
        return rc;
    if (c->meta_count < 0 || (c->meta_count > 0 && (!c->meta_keys || !c->meta_values)))
        return dp_fail(DP_EINVAL, "%s: invalid metadata list (count %d)", path, c->meta_count);
    for (int i = 0; i < c->meta_count; i++)
        if (!c->meta_keys[i] || !c->meta_values[i])
            return dp_fail(DP_EINVAL, "%s: metadata entry %d is NULL", path, i);
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
    put_text(s, "}");
}

static void put_tensor_entry(text_sink *s, const dp_tensor_ref *t, int64_t begin)
{
    put_json_string(s, t->name);
    put_text(s, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
        if (d > 0)
            put_text(s, ",");
        put_int(s, t->shape[d]);
    }
    put_text(s, "],\"data_offsets\":[");
    put_int(s, begin);
    put_text(s, ",");
    put_int(s, begin + tensor_bytes(t));
    put_text(s, "]}");
}

static void put_header(text_sink *s, const st_contents *c)
{
    put_text(s, "{");
    if (c->meta_count > 0)
        put_metadata(s, c);
    int64_t offset = 0;
    for (int i = 0; i < c->count; i++) {
        if (i > 0 || c->meta_count > 0)
            put_text(s, ",");
        put_tensor_entry(s, &c->tensors[i], offset);
        offset += tensor_bytes(&c->tensors[i]);
    }
    put_text(s, "}");
}

/* Space padding keeps the data section 8-byte aligned, as the reference implementation does.
 * Returns NULL (after dp_fail) when out of memory. */
static char *build_header(const st_contents *c, size_t *padded_len)
{
    text_sink measure = {NULL, 0};
    put_header(&measure, c);
    size_t padded = (measure.len + HEADER_ALIGN - 1) / HEADER_ALIGN * HEADER_ALIGN;
    text_sink sink = {dp_alloc(padded, "safetensors header"), 0};
    if (!sink.out)
        return NULL;
    put_header(&sink, c);
    memset(sink.out + sink.len, ' ', padded - sink.len);
    *padded_len = padded;
    return sink.out;
}

/* --- file writing --- */

/* What one write puts in the file: the length prefix and padded header, then the data. */
typedef struct st_file {
    const char *header;
    size_t header_len;
    const st_contents *contents;
} st_file;

static int write_contents(FILE *f, const void *context)
{
    const st_file *file = context;
    const st_contents *c = file->contents;
    unsigned char prefix[PREFIX_BYTES];
    encode_u64le(file->header_len, prefix);
    if (fwrite(prefix, 1, sizeof prefix, f) != sizeof prefix ||
        fwrite(file->header, 1, file->header_len, f) != file->header_len)
        return -1;
    for (int i = 0; i < c->count; i++) {
        size_t n = (size_t)dp_tensor_numel(&c->tensors[i]);
        if (n > 0 && fwrite(c->tensors[i].data, sizeof(float), n, f) != n)
            return -1;
    }
    return 0;
}

int dp_safetensors_write(const char *path, const dp_tensor_ref *tensors, int count,
                         const char *const *meta_keys, const char *const *meta_values,
                         int meta_count)
{
    const st_contents contents = {tensors, count, meta_keys, meta_values, meta_count};
    int rc = check_write_arguments(path, &contents);
    if (rc)
        return rc;
    size_t header_len = 0;
    char *header = build_header(&contents, &header_len);
    if (!header)
        return DP_ENOMEM;
    const st_file file = {header, header_len, &contents};
    rc = dp_write_file_atomically(path, write_contents, &file);
    free(header);
    return rc;
}

/* --- strict JSON parser over the header buffer ---
 * Every routine reads only within [pos, end) and returns 0, or -1 on malformed input. */

typedef struct json_cursor {
    const char *pos;
    const char *end;
} json_cursor;

static int skip_value(json_cursor *c, int depth);

static void skip_space(json_cursor *c)
{
    while (c->pos < c->end &&
           (*c->pos == ' ' || *c->pos == '\t' || *c->pos == '\n' || *c->pos == '\r'))
        c->pos++;
}

/* The next significant character, or -1 at the end of the buffer. */
static int peek(json_cursor *c)
{
    skip_space(c);
    return c->pos < c->end ? (unsigned char)*c->pos : -1;
}

static int accept_char(json_cursor *c, char ch)
{
    if (peek(c) != (unsigned char)ch)
        return 0;
    c->pos++;
    return 1;
}

static int expect_char(json_cursor *c, char ch)
{
    return accept_char(c, ch) ? 0 : -1;
}

static int parse_hex4(json_cursor *c, uint32_t *unit)
{
    if (c->end - c->pos < 4)
        return -1;
    uint32_t value = 0;
    for (int i = 0; i < 4; i++) {
        char h = *c->pos++;
        int digit = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
        if (digit < 0)
            return -1;
        value = value << 4 | (uint32_t)digit;
    }
    *unit = value;
    return 0;
}

/* After "\u": one code unit, or a surrogate pair forming one code point; lone surrogates fail. */
static int parse_unicode_escape(json_cursor *c, uint32_t *code_point)
{
    uint32_t high, low;
    if (parse_hex4(c, &high) || (high >= 0xDC00 && high <= 0xDFFF))
        return -1;
    if (high < 0xD800 || high > 0xDBFF) {
        *code_point = high;
        return 0;
    }
    if (c->end - c->pos < 2 || c->pos[0] != '\\' || c->pos[1] != 'u')
        return -1;
    c->pos += 2;
    if (parse_hex4(c, &low) || low < 0xDC00 || low > 0xDFFF)
        return -1;
    *code_point = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
    return 0;
}

static size_t encode_utf8(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* After a backslash: decodes one escape into out, returning its byte count (0 if invalid). */
static size_t decode_escape(json_cursor *c, char out[4])
{
    static const char escaped[] = "\"\\/bfnrt";
    static const char decoded[] = "\"\\/\b\f\n\r\t";
    if (c->pos == c->end)
        return 0;
    char ch = *c->pos++;
    if (ch == 'u') {
        uint32_t code_point;
        return parse_unicode_escape(c, &code_point) ? 0 : encode_utf8(code_point, out);
    }
    const char *hit = ch ? strchr(escaped, ch) : NULL;
    if (!hit)
        return 0;
    out[0] = decoded[hit - escaped];
    return 1;
}

/* Decodes a string into out (at most cap bytes; out may be NULL to just skip it) and sets
 * *len, when given, to the full decoded length so callers can tell it did not fit. */
static int parse_string(json_cursor *c, char *out, size_t cap, size_t *len)
{
    if (expect_char(c, '"'))
        return -1;
    size_t n = 0;
    while (c->pos < c->end && *c->pos != '"') {
        char bytes[4] = {*c->pos++};
        size_t count = 1;
        if ((unsigned char)bytes[0] < 0x20)
            return -1;
        if (bytes[0] == '\\' && (count = decode_escape(c, bytes)) == 0)
            return -1;
        for (size_t i = 0; i < count; i++, n++)
            if (out && n < cap)
                out[n] = bytes[i];
    }
    if (c->pos == c->end)
        return -1;
    c->pos++;
    if (len)
        *len = n;
    return 0;
}

static size_t skip_digits(const char **p, const char *end)
{
    const char *start = *p;
    while (*p < end && **p >= '0' && **p <= '9')
        (*p)++;
    return (size_t)(*p - start);
}

/* JSON number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(json_cursor *c)
{
    skip_space(c);
    const char *p = c->pos, *end = c->end;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0')
        p++;
    else if (!skip_digits(&p, end))
        return -1;
    if (p < end && *p == '.') {
        p++;
        if (!skip_digits(&p, end))
            return -1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (!skip_digits(&p, end))
            return -1;
    }
    c->pos = p;
    return 0;
}

/* A number that is a plain non-negative integer fitting int64 (a shape or an offset). */
static int parse_index(json_cursor *c, int64_t *value)
{
    skip_space(c);
    const char *start = c->pos;
    if (skip_number(c))
        return -1;
    int64_t v = 0;
    for (const char *p = start; p < c->pos; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - (*p - '0')) / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    *value = v;
    return 0;
}

static int skip_literal(json_cursor *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->pos) < n || memcmp(c->pos, word, n) != 0)
        return -1;
    c->pos += n;
    return 0;
}

/* Scans an array. With indices non-NULL every element must be a non-negative integer; the
 * first cap are stored and *count gets the full length. */
static int scan_array(json_cursor *c, int depth, int64_t *indices, int cap, int *count)
{
    if (expect_char(c, '['))
        return -1;
    int n = 0;
    if (peek(c) != ']') {
        do {
            int64_t value = 0;
            if (indices ? parse_index(c, &value) : skip_value(c, depth))
                return -1;
            if (indices && n < cap)
                indices[n] = value;
            n++;
        } while (accept_char(c, ','));
    }
    if (count)
        *count = n;
    return expect_char(c, ']');
}

static int key_equals(const char *key, size_t key_len, size_t cap, const char *wanted)
{
    return key_len <= cap && key_len == strlen(wanted) && memcmp(key, wanted, key_len) == 0;
}

/* Scans an object. With wanted non-NULL (shorter than DP_TENSOR_NAME_MAX), *found is set to
 * the first member value under that key, or has pos NULL when there is none. */
static int scan_object(json_cursor *c, int depth, const char *wanted, json_cursor *found)
{
    if (found)
        found->pos = NULL;
    if (expect_char(c, '{'))
        return -1;
    if (peek(c) != '}') {
        do {
            char key[DP_TENSOR_NAME_MAX];
            size_t key_len = 0;
            if (parse_string(c, key, sizeof key, &key_len) || expect_char(c, ':'))
                return -1;
            skip_space(c);
            json_cursor value = *c;
            if (skip_value(c, depth))
                return -1;
            value.end = c->pos;
            if (wanted && !found->pos && key_equals(key, key_len, sizeof key, wanted))
                *found = value;
        } while (accept_char(c, ','));
    }
    return expect_char(c, '}');
}

static int skip_value(json_cursor *c, int depth)
{
    if (depth >= JSON_MAX_DEPTH)
        return -1;
    switch (peek(c)) {
    case '{': return scan_object(c, depth + 1, NULL, NULL);
    case '[': return scan_array(c, depth + 1, NULL, 0, NULL);
    case '"': return parse_string(c, NULL, 0, NULL);
    case 't': return skip_literal(c, "true");
    case 'f': return skip_literal(c, "false");
    case 'n': return skip_literal(c, "null");
    default: return skip_number(c);
    }
}

/* Member lookup in an already validated object; found->pos is NULL when key is absent or
 * obj is not an object. */
static void find_member(json_cursor obj, const char *key, json_cursor *found)
{
    scan_object(&obj, 0, key, found);
}

/* --- header checks --- */

static int parse_header(const char *path, const char *json, size_t len, json_cursor *root)
{
    json_cursor c = {json, json + len};
    *root = c;
    if (skip_value(&c, 0) || peek(&c) != -1) {
        int shown = (int)(c.end - c.pos < 24 ? c.end - c.pos : 24);
        return dp_fail(DP_EFORMAT, "%s: malformed JSON header at byte %td of %zu, near \"%.*s\"",
                       path, c.pos - json, len, shown, c.pos);
    }
    if (peek(root) != '{')
        return dp_fail(DP_EFORMAT, "%s: header is not a JSON object", path);
    return 0;
}

static int check_dtype(const char *path, const dp_tensor_ref *t, json_cursor value)
{
    char dtype[16];
    size_t len = 0;
    if (!value.pos || parse_string(&value, dtype, sizeof dtype, &len))
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' has no string dtype", path, t->name);
    if (len == 3 && memcmp(dtype, "F32", 3) == 0)
        return 0;
    int shown = (int)(len < sizeof dtype ? len : sizeof dtype);
    return dp_fail(DP_EFORMAT, "%s: tensor '%s' has dtype %.*s, expected F32", path, t->name,
                   shown, dtype);
}

static void format_shape(const int64_t *dims, int ndim, char text[SHAPE_TEXT_MAX])
{
    size_t len = 0;
    text[len++] = '[';
    for (int d = 0; d < ndim; d++)
        len += (size_t)snprintf(text + len, SHAPE_TEXT_MAX - len, "%s%" PRId64, d ? ", " : "",
                                dims[d]);
    snprintf(text + len, SHAPE_TEXT_MAX - len, "]");
}

static int check_shape(const char *path, const dp_tensor_ref *t, json_cursor value)
{
    int64_t dims[DP_TENSOR_MAX_DIMS];
    int ndim = 0;
    if (!value.pos || scan_array(&value, 0, dims, DP_TENSOR_MAX_DIMS, &ndim))
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' has no valid shape (an array of non-negative integers)",
                       path, t->name);
    if (ndim == t->ndim && memcmp(dims, t->shape, (size_t)ndim * sizeof *dims) == 0)
        return 0;
    char expected[SHAPE_TEXT_MAX];
    format_shape(t->shape, t->ndim, expected);
    if (ndim > DP_TENSOR_MAX_DIMS)
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' has %d dimensions, expected shape %s", path,
                       t->name, ndim, expected);
    char found[SHAPE_TEXT_MAX];
    format_shape(dims, ndim, found);
    return dp_fail(DP_EFORMAT, "%s: tensor '%s' has shape %s, expected %s", path, t->name, found,
                   expected);
}

static int check_offsets(const char *path, const dp_tensor_ref *t, json_cursor value,
                         int64_t data_size, int64_t *begin)
{
    int64_t range[2];
    int n = 0;
    if (!value.pos || scan_array(&value, 0, range, 2, &n) || n != 2 || range[0] > range[1])
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' has invalid data_offsets (expected [begin, end] with "
                       "0 <= begin <= end)",
                       path, t->name);
    if (range[1] > data_size)
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' data_offsets [%" PRId64 ", %" PRId64
                       "] extend past the %" PRId64 "-byte data section (truncated file?)",
                       path, t->name, range[0], range[1], data_size);
    if (range[1] - range[0] != tensor_bytes(t))
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' data_offsets [%" PRId64 ", %" PRId64 "] span %" PRId64
                       " bytes, expected %" PRId64 " for its shape",
                       path, t->name, range[0], range[1], range[1] - range[0], tensor_bytes(t));
    *begin = range[0];
    return 0;
}

/* Checks name's header entry against t; *begin gets its offset into the data section. */
static int locate_tensor(const char *path, json_cursor root, int64_t data_size,
                         const dp_tensor_ref *t, int64_t *begin)
{
    json_cursor entry, dtype, shape, offsets;
    find_member(root, t->name, &entry);
    if (!entry.pos)
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' not found", path, t->name);
    if (peek(&entry) != '{')
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' entry is not a JSON object", path, t->name);
    find_member(entry, "dtype", &dtype);
    find_member(entry, "shape", &shape);
    find_member(entry, "data_offsets", &offsets);
    int rc = check_dtype(path, t, dtype);
    if (rc == 0)
        rc = check_shape(path, t, shape);
    if (rc == 0)
        rc = check_offsets(path, t, offsets, data_size, begin);
    return rc;
}

/* --- file reading --- */

static int read_exact(FILE *f, const char *path, void *buf, size_t len)
{
    if (len == 0 || fread(buf, 1, len, f) == len)
        return 0;
    if (ferror(f))
        return dp_fail(DP_EIO, "%s: read failed: %s", path, strerror(errno));
    return dp_fail(DP_EFORMAT, "%s: file ends unexpectedly", path);
}

/* Reads the JSON header into a new buffer (*json, which the caller frees) and sets the size
 * of the data section that follows it. */
static int read_header(FILE *f, const char *path, char **json, size_t *json_len,
                       int64_t *data_size)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        return dp_fail(DP_EIO, "%s: cannot stat: %s", path, strerror(errno));
    int64_t file_size = (int64_t)st.st_size;
    if (file_size < PREFIX_BYTES)
        return dp_fail(DP_EFORMAT, "%s: file of %" PRId64 " bytes is too short for a "
                       "safetensors header", path, file_size);
    unsigned char prefix[PREFIX_BYTES];
    int rc = read_exact(f, path, prefix, sizeof prefix);
    if (rc)
        return rc;
    uint64_t len = decode_u64le(prefix);
    if (len > MAX_HEADER_BYTES)
        return dp_fail(DP_EFORMAT, "%s: header length %" PRIu64 " exceeds the %u-byte limit",
                       path, len, MAX_HEADER_BYTES);
    if (len > (uint64_t)(file_size - PREFIX_BYTES))
        return dp_fail(DP_EFORMAT, "%s: header length %" PRIu64 " extends past the end of the "
                       "%" PRId64 "-byte file", path, len, file_size);
    *json = dp_alloc((size_t)len, "safetensors header");
    if (!*json)
        return DP_ENOMEM;
    *json_len = (size_t)len;
    *data_size = file_size - PREFIX_BYTES - (int64_t)len;
    return read_exact(f, path, *json, *json_len);
}

static int read_tensor_data(FILE *f, const char *path, int64_t data_start,
                            const dp_tensor_ref *t, int64_t begin)
{
    if (fseeko(f, (off_t)(data_start + begin), SEEK_SET) != 0)
        return dp_fail(DP_EIO, "%s: seek failed: %s", path, strerror(errno));
    return read_exact(f, path, t->data, (size_t)tensor_bytes(t));
}

static int read_metadata_value(const char *path, json_cursor metadata, dp_meta *entry)
{
    json_cursor value;
    size_t len = 0;
    entry->value[0] = '\0';
    if (!metadata.pos)
        return 0;
    find_member(metadata, entry->key, &value);
    if (!value.pos)
        return 0;
    if (parse_string(&value, entry->value, sizeof entry->value - 1, &len) ||
        len >= sizeof entry->value)
        return dp_fail(DP_EFORMAT, "%s: metadata '%s' is not a string of at most %zu bytes",
                       path, entry->key, sizeof entry->value - 1);
    entry->value[len] = '\0';
    return 0;
}

/* Every entry is checked before any data is read, so a malformed file leaves expected as it
 * was; only an I/O error midway can leave it partly filled. */
static int read_tensors(FILE *f, const char *path, dp_tensor_ref *expected, int count,
                        dp_meta *meta, int meta_count)
{
    char *json = NULL;
    size_t json_len = 0;
    int64_t data_size = 0;
    json_cursor root;
    int64_t *begins = dp_calloc((size_t)count, sizeof *begins, "tensor offsets");
    int rc = begins ? read_header(f, path, &json, &json_len, &data_size) : DP_ENOMEM;
    if (rc == 0)
        rc = parse_header(path, json, json_len, &root);
    for (int i = 0; rc == 0 && i < count; i++)
        rc = locate_tensor(path, root, data_size, &expected[i], &begins[i]);
    json_cursor metadata = {NULL, NULL};
    if (rc == 0 && meta_count)
        find_member(root, "__metadata__", &metadata);
    for (int i = 0; rc == 0 && i < meta_count; i++)
        rc = read_metadata_value(path, metadata, &meta[i]);
    int64_t data_start = PREFIX_BYTES + (int64_t)json_len;
    for (int i = 0; rc == 0 && i < count; i++)
        rc = read_tensor_data(f, path, data_start, &expected[i], begins[i]);
    free(json);
    free(begins);
    return rc;
}

int dp_safetensors_read_with_metadata(const char *path, dp_tensor_ref *expected, int count,
                                      dp_meta *meta, int meta_count)
{
    int rc = check_tensor_refs(path, expected, count);
    if (rc)
        return rc;
    FILE *f = fopen(path, "rb");
    if (!f)
        return dp_fail(DP_EIO, "%s: cannot open: %s", path, strerror(errno));
    rc = read_tensors(f, path, expected, count, meta, meta_count);
    fclose(f);
    return rc;
}

int dp_safetensors_read(const char *path, dp_tensor_ref *expected, int count)
{
    return dp_safetensors_read_with_metadata(path, expected, count, NULL, 0);
}
