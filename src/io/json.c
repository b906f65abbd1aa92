#include "src/io/json.h"

#include <string.h>

int dp_json_is_utf8(const char *bytes, size_t len)
{
    const unsigned char *p = (const unsigned char *)bytes, *end = p + len;
    while (p < end) {
        unsigned char b = *p;
        /* Sequence length and the range its second byte must lie in (rules out overlong
         * forms, UTF-16 surrogates and code points above U+10FFFF). */
        size_t n;
        unsigned char low = 0x80, high = 0xBF;
        if (b < 0x80)
            n = 1;
        else if (b >= 0xC2 && b <= 0xDF)
            n = 2;
        else if (b >= 0xE0 && b <= 0xEF) {
            n = 3;
            low = b == 0xE0 ? 0xA0 : 0x80;
            high = b == 0xED ? 0x9F : 0xBF;
        } else if (b >= 0xF0 && b <= 0xF4) {
            n = 4;
            low = b == 0xF0 ? 0x90 : 0x80;
            high = b == 0xF4 ? 0x8F : 0xBF;
        } else
            return 0;
        if ((size_t)(end - p) < n)
            return 0;
        for (size_t i = 1; i < n; i++) {
            unsigned char lo = i == 1 ? low : 0x80, hi = i == 1 ? high : 0xBF;
            if (p[i] < lo || p[i] > hi)
                return 0;
        }
        p += n;
    }
    return 1;
}

static void skip_space(dp_json *c)
{
    while (c->pos < c->end &&
           (*c->pos == ' ' || *c->pos == '\t' || *c->pos == '\n' || *c->pos == '\r'))
        c->pos++;
}

int dp_json_peek(dp_json *c)
{
    skip_space(c);
    return c->pos < c->end ? (unsigned char)*c->pos : -1;
}

static int accept_char(dp_json *c, char ch)
{
    if (dp_json_peek(c) != (unsigned char)ch)
        return 0;
    c->pos++;
    return 1;
}

static int expect_char(dp_json *c, char ch)
{
    return accept_char(c, ch) ? 0 : -1;
}

static int parse_hex4(dp_json *c, uint32_t *unit)
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
static int parse_unicode_escape(dp_json *c, uint32_t *code_point)
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
static size_t decode_escape(dp_json *c, char out[4])
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

int dp_json_string(dp_json *c, char *out, size_t cap, size_t *len)
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
static int skip_number(dp_json *c)
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

int dp_json_index(dp_json *c, int64_t *value)
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

static int skip_literal(dp_json *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->pos) < n || memcmp(c->pos, word, n) != 0)
        return -1;
    c->pos += n;
    return 0;
}

/* The members or elements of a container, each value handed to visit (or only skipped). */
static int walk(dp_json *c, int depth, int object, dp_json_member_fn member,
                dp_json_element_fn element, void *context)
{
    if (depth >= DP_JSON_MAX_DEPTH || expect_char(c, object ? '{' : '['))
        return -1;
    if (dp_json_peek(c) != (object ? '}' : ']')) {
        do {
            dp_json key = {NULL, NULL};
            if (object) {
                dp_json_peek(c);
                key = *c;
                if (dp_json_string(c, NULL, 0, NULL) || expect_char(c, ':'))
                    return -1;
                key.end = c->pos;
            }
            dp_json_peek(c);
            dp_json value = *c;
            if (dp_json_skip_value(c, depth + 1))
                return -1;
            value.end = c->pos;
            int rc = object ? (member ? member(key, value, context) : 0)
                            : (element ? element(value, context) : 0);
            if (rc)
                return rc;
        } while (accept_char(c, ','));
    }
    return expect_char(c, object ? '}' : ']');
}

int dp_json_skip_value(dp_json *c, int depth)
{
    switch (dp_json_peek(c)) {
    case '{': return walk(c, depth, 1, NULL, NULL, NULL);
    case '[': return walk(c, depth, 0, NULL, NULL, NULL);
    case '"': return dp_json_string(c, NULL, 0, NULL);
    case 't': return skip_literal(c, "true");
    case 'f': return skip_literal(c, "false");
    case 'n': return skip_literal(c, "null");
    default: return skip_number(c);
    }
}

int dp_json_object(dp_json *c, dp_json_member_fn member, void *context)
{
    return walk(c, 0, 1, member, NULL, context);
}

int dp_json_array(dp_json *c, dp_json_element_fn element, void *context)
{
    return walk(c, 0, 0, NULL, element, context);
}

int dp_json_is_null(dp_json v)
{
    return dp_json_peek(&v) == 'n' && skip_literal(&v, "null") == 0 && dp_json_peek(&v) == -1;
}
