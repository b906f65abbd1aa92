/* Fuzz target: the safetensors reader on arbitrary bytes, expecting the tensors and metadata
 * keys the seed corpus holds (a matrix, a vector, a scalar, an empty tensor; "step" and
 * "config"), and holding it to its promises: a malformed file leaves the caller's buffers
 * untouched, metadata values come back as terminated strings, and every file it accepts is
 * one the format allows. That last promise is checked by an oracle written here apart from
 * the reader (its own JSON walk): the header is UTF-8, no name appears twice however it is
 * escaped, metadata values are strings, and the tensors' ranges tile the data section
 * exactly (no overlap, hole or trailing byte). The file's own CRC (checkpoints) is checked
 * too: with any input a verification may fail, but never crash or pass a file whose CRC
 * does not match its bytes. */
#include "dp/error.h"
#include "dp/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SENTINEL 0xA5
#define ORACLE_MAX_MEMBERS 256
#define ORACLE_NAME_MAX 4096

typedef struct expected_buffers {
    float weight[6], bias[3], scale;
} expected_buffers;

static void expected_refs(expected_buffers *b, dp_tensor_ref refs[4])
{
    refs[0] = (dp_tensor_ref){.name = "layers.0.weight", .ndim = 2, .shape = {3, 2},
                              .data = b->weight};
    refs[1] = (dp_tensor_ref){.name = "layers.0.bias", .ndim = 1, .shape = {3}, .data = b->bias};
    refs[2] = (dp_tensor_ref){.name = "scale", .ndim = 0, .data = &b->scale};
    refs[3] = (dp_tensor_ref){.name = "empty", .ndim = 2, .shape = {0, 4}, .data = NULL};
}

static int untouched(const expected_buffers *b)
{
    const uint8_t *bytes = (const uint8_t *)b;
    for (size_t i = 0; i < sizeof *b; i++)
        if (bytes[i] != SENTINEL)
            return 0;
    return 1;
}

/* --- the oracle: a deliberately simple, separate reading of an accepted header --- */

typedef struct cursor {
    const uint8_t *p, *end;
} cursor;

static void blank(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int next_is(cursor *c, uint8_t ch)
{
    blank(c);
    return c->p < c->end && *c->p == ch;
}

static int take(cursor *c, uint8_t ch)
{
    if (!next_is(c, ch))
        return 0;
    c->p++;
    return 1;
}

static int utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = s[i] < 0x80 ? 1 : (s[i] >> 5) == 6 ? 2 : (s[i] >> 4) == 14 ? 3 : (s[i] >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        cp = len == 1 ? s[i] : (uint32_t)(s[i] & (0x7F >> len));
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < smallest[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

static int hex_value(uint8_t h)
{
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
}

static int read_hex4(cursor *c, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++, c->p++) {
        int h = c->p < c->end ? hex_value(*c->p) : -1;
        if (h < 0)
            return 0;
        *v = *v << 4 | (uint32_t)h;
    }
    return 1;
}

/* Decodes a JSON string into out (cut at cap; *len the full decoded length). */
static int read_string(cursor *c, char *out, size_t cap, size_t *len)
{
    *len = 0;
    if (!take(c, '"'))
        return 0;
    while (c->p < c->end && *c->p != '"') {
        uint32_t cp = *c->p++;
        if (cp < 0x20)
            return 0;
        if (cp == '\\') {
            if (c->p >= c->end)
                return 0;
            uint8_t e = *c->p++;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                cp = (uint32_t)"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            } else if (e == 'u') {
                uint32_t low;
                if (!read_hex4(c, &cp))
                    return 0;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
                        return 0;
                    c->p += 2;
                    if (!read_hex4(c, &low) || low < 0xDC00 || low > 0xDFFF)
                        return 0;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return 0;
                }
                char utf8[4];
                size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
                for (size_t k = n; k-- > 1; cp >>= 6)
                    utf8[k] = (char)(0x80 | (cp & 0x3F));
                utf8[0] = (char)(n == 1 ? cp : (0xF00 >> n & 0xF0) | cp);
                for (size_t k = 0; k < n; k++, (*len)++)
                    if (*len < cap)
                        out[*len] = utf8[k];
                continue;
            } else {
                return 0;
            }
        }
        if (*len < cap)
            out[*len] = (char)cp;
        (*len)++;
    }
    return take(c, '"');
}

static int skip(cursor *c, int depth)
{
    char scratch[1];
    size_t len;
    blank(c);
    if (depth > 100 || c->p >= c->end)
        return 0;
    if (*c->p == '"')
        return read_string(c, scratch, 0, &len);
    if (*c->p == '{' || *c->p == '[') {
        uint8_t close = *c->p == '{' ? '}' : ']';
        int object = *c->p++ == '{';
        if (take(c, close))
            return 1;
        do {
            if (object && (!read_string(c, scratch, 0, &len) || !take(c, ':')))
                return 0;
            if (!skip(c, depth + 1))
                return 0;
        } while (take(c, ','));
        return take(c, close);
    }
    const uint8_t *start = c->p;
    while (c->p < c->end && strchr("0123456789+-.eEtruefalsn", *c->p))
        c->p++;
    return c->p > start;
}

static int read_u64(cursor *c, uint64_t *v)
{
    blank(c);
    const uint8_t *start = c->p;
    *v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        *v = *v * 10 + (uint64_t)(*c->p++ - '0');
    return c->p > start;
}

typedef struct member {
    char name[ORACLE_NAME_MAX];
    size_t len;
} member;

static int named(const member *m, const char *name)
{
    return m->len == strlen(name) && memcmp(m->name, name, m->len) == 0;
}

typedef int (*member_check)(const member *name, cursor *value, void *context);

/* Reads an object, requiring unique names (compared decoded) and check() of every value. */
static void read_members(cursor *c, member *names, member_check check, void *context)
{
    int n = 0;
    fuzz_require(take(c, '{'), "oracle: an accepted object does not open with '{'");
    if (take(c, '}'))
        return;
    do {
        fuzz_require(n < ORACLE_MAX_MEMBERS, "oracle: more members than it can hold");
        member *m = &names[n++];
        fuzz_require(read_string(c, m->name, ORACLE_NAME_MAX, &m->len) && take(c, ':'),
                     "oracle: an accepted header has a malformed key");
        for (int i = 0; i + 1 < n; i++)
            fuzz_require(names[i].len != m->len || memcmp(names[i].name, m->name, m->len) != 0,
                         "accepted a header with a name twice");
        blank(c);
        cursor value = *c;
        fuzz_require(skip(c, 0), "oracle: an accepted header has a malformed value");
        value.end = c->p;
        check(m, &value, context);
    } while (take(c, ','));
    fuzz_require(take(c, '}'), "oracle: an accepted object does not close");
}

static int metadata_value(const member *name, cursor *value, void *context)
{
    (void)name;
    (void)context;
    fuzz_require(next_is(value, '"'), "accepted a metadata value that is not a string");
    return 0;
}

typedef struct ranges {
    uint64_t begin[ORACLE_MAX_MEMBERS], end[ORACLE_MAX_MEMBERS];
    int count;
} ranges;

static int tensor_field(const member *name, cursor *value, void *context)
{
    ranges *r = context;
    if (!named(name, "data_offsets"))
        return 0;
    fuzz_require(take(value, '[') && read_u64(value, &r->begin[r->count]) && take(value, ',') &&
                     read_u64(value, &r->end[r->count]) && take(value, ']'),
                 "accepted malformed data_offsets");
    r->count++;
    return 0;
}

/* "__metadata__": null, or an object of strings; anything else: a tensor entry. */
static int top_level_member(const member *name, cursor *value, void *context)
{
    static member inner[ORACLE_MAX_MEMBERS];
    ranges *r = context;
    if (named(name, "__metadata__")) {
        blank(value);
        if (value->end - value->p == 4 && memcmp(value->p, "null", 4) == 0)
            return 0;
        read_members(value, inner, metadata_value, NULL);
        return 0;
    }
    int before = r->count;
    read_members(value, inner, tensor_field, r);
    fuzz_require(r->count == before + 1, "accepted a tensor entry without data_offsets");
    return 0;
}

/* The ranges, sorted, must tile [0, data_size): each begins where the last ended. */
static void check_tiling(ranges *r, uint64_t data_size)
{
    for (int i = 1; i < r->count; i++)
        for (int j = i; j > 0 && (r->begin[j] < r->begin[j - 1] ||
                                  (r->begin[j] == r->begin[j - 1] && r->end[j] < r->end[j - 1])); j--) {
            uint64_t b = r->begin[j], e = r->end[j];
            r->begin[j] = r->begin[j - 1], r->end[j] = r->end[j - 1];
            r->begin[j - 1] = b, r->end[j - 1] = e;
        }
    uint64_t covered = 0;
    for (int i = 0; i < r->count; i++) {
        fuzz_require(r->begin[i] <= covered, "accepted a data section with a hole");
        fuzz_require(r->begin[i] >= covered, "accepted overlapping tensor ranges");
        fuzz_require(r->end[i] >= r->begin[i], "accepted a range that ends before it begins");
        covered = r->end[i];
    }
    fuzz_require(covered == data_size, "accepted a data section with trailing bytes");
}

static void check_accepted_file(const uint8_t *data, size_t size)
{
    static member names[ORACLE_MAX_MEMBERS];
    static ranges r;
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)data[i] << (8 * i);
    fuzz_require(utf8_valid(data + 8, (size_t)len), "accepted a header that is not UTF-8");
    cursor c = {data + 8, data + 8 + len};
    r.count = 0;
    read_members(&c, names, top_level_member, &r);
    check_tiling(&r, size - 8 - len);
}

/* The CRC check on any bytes: a pass means some "crc32-file:" value in the file states the
 * CRC of the file's bytes with that value's eight digits as '0'. */
static void check_crc_verification(const uint8_t *data, size_t size)
{
    if (dp_safetensors_verify_crc(fuzz_file_put(1, data, size), "step") != 0)
        return;
    const char *mark = DP_SAFETENSORS_CRC_PREFIX;
    size_t mark_len = strlen(mark);
    uint8_t *copy = malloc(size);
    fuzz_require(copy != NULL, "out of memory");
    int matched = 0;
    for (size_t i = 8; i + mark_len + 8 <= size && !matched; i++) {
        if (memcmp(data + i, mark, mark_len) != 0)
            continue;
        char digits[9] = {0};
        memcpy(digits, data + i + mark_len, 8);
        memcpy(copy, data, size);
        memset(copy + i + mark_len, '0', 8);
        matched = crc32(crc32(0L, Z_NULL, 0), copy, (uInt)size) == strtoul(digits, NULL, 16);
    }
    free(copy);
    fuzz_require(matched, "a file passed CRC verification with the wrong CRC");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    expected_buffers buffers;
    memset(&buffers, SENTINEL, sizeof buffers);
    dp_tensor_ref refs[4];
    expected_refs(&buffers, refs);
    dp_meta meta[2] = {{.key = "step"}, {.key = "config"}};
    int rc = dp_safetensors_read_with_metadata(fuzz_file_put(0, data, size), refs, 4, meta, 2);
    /* A refusal is a malformed file (EFORMAT) or a tensor of another shape than asked (ESHAPE). */
    fuzz_require(rc == 0 || rc == DP_EFORMAT || rc == DP_ESHAPE, "unexpected error code for an in-memory file");
    fuzz_require(rc == 0 || untouched(&buffers), "a malformed file changed the buffers");
    fuzz_touch(&buffers, sizeof buffers);
    for (int i = 0; rc == 0 && i < 2; i++)
        fuzz_require(memchr(meta[i].value, '\0', sizeof meta[i].value) != NULL,
                     "a metadata value is not terminated");
    if (rc == 0)
        check_accepted_file(data, size);
    check_crc_verification(data, size);
    return 0;
}
