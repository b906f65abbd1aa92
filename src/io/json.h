/* A strict JSON reader over a byte buffer (RFC 8259 grammar, UTF-8), for the safetensors
 * header: every routine reads only within [pos, end) and returns 0, or -1 on malformed input. */
#ifndef DP_IO_JSON_H
#define DP_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#define DP_JSON_MAX_DEPTH 64

typedef struct dp_json {
    const char *pos;
    const char *end;
} dp_json;

/* 1 when the len bytes are well-formed UTF-8 (no overlong forms, surrogates or code points
 * above U+10FFFF), as Rust's str::from_utf8 requires of a safetensors header. */
int dp_json_is_utf8(const char *bytes, size_t len);

/* The next significant character (after whitespace), or -1 at the end of the buffer. */
int dp_json_peek(dp_json *c);

/* Skips one value of any kind, nested at most DP_JSON_MAX_DEPTH - depth levels. */
int dp_json_skip_value(dp_json *c, int depth);

/* Decodes a string into out (at most cap bytes; out may be NULL to just skip it) and sets *len,
 * when given, to the full decoded length so callers can tell it did not fit. */
int dp_json_string(dp_json *c, char *out, size_t cap, size_t *len);

/* A number that is a plain non-negative integer fitting int64 (a shape or an offset). */
int dp_json_index(dp_json *c, int64_t *value);

/* Visits every member of the object at c (consumed): key is the raw string (at its quote),
 * value the raw value. A non-zero return from member stops the walk and is returned. */
typedef int (*dp_json_member_fn)(dp_json key, dp_json value, void *context);
int dp_json_object(dp_json *c, dp_json_member_fn member, void *context);

/* Visits every element of the array at c (consumed), as dp_json_object does. */
typedef int (*dp_json_element_fn)(dp_json value, void *context);
int dp_json_array(dp_json *c, dp_json_element_fn element, void *context);

/* 1 when the raw value at v is the literal null. */
int dp_json_is_null(dp_json v);

#endif
