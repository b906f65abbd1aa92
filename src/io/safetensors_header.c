#include "src/io/safetensors_header.h"

#include "dp/error.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char METADATA_KEY[] = "__metadata__";

/* The byte-sized dtypes of the format; sub-byte ones (F4, F6_*) are not accepted. */
static const struct {
    const char *name;
    size_t size;
} dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1},
              {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},
              {"U32", 4},  {"F32", 4}, {"F64", 8},  {"I64", 8},     {"U64", 8}};

size_t st_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtype, dtypes[i].name) == 0)
            return dtypes[i].size;
    return 0;
}

/* --- parsing --- */

typedef struct parser {
    const char *path;
    st_header *h;
    size_t arena_used, arena_size;
    int saw_metadata;
    int status;                      /* the first failure, reported once the walk stops */
    st_tensor *tensor;               /* the entry being filled */
    int seen_dtype, seen_shape, seen_offsets;
    int64_t numel;
    int numel_overflow;
} parser;

static int stop(parser *p, int status)
{
    p->status = status;
    return 1;
}

/* Decodes a key (what: "tensor name", "metadata key") into the arena; keys decode to at most
 * their raw length. A name holding "\u0000" is refused (NULL, p->status set): C strings
 * could not tell "a\u0000b" from "a". */
static const char *decode_key(parser *p, dp_json key, const char *what, size_t *len)
{
    char *out = p->h->names + p->arena_used;
    size_t n = 0;
    if (dp_json_string(&key, out, p->arena_size - p->arena_used - 1, &n) ||
        n >= p->arena_size - p->arena_used || memchr(out, '\0', n)) {
        stop(p, dp_fail(DP_EFORMAT, "%s: a %s holds a NUL character", p->path, what));
        return NULL;
    }
    out[n] = '\0';
    p->arena_used += n + 1;
    *len = n;
    return out;
}

static int count_member(dp_json key, dp_json value, void *count)
{
    (void)key;
    (void)value;
    ++*(int *)count;
    return 0;
}

static int add_meta_entry(dp_json key, dp_json value, void *context)
{
    parser *p = context;
    size_t len = 0;
    const char *name = decode_key(p, key, "metadata key", &len);
    if (!name)
        return 1;
    if (dp_json_peek(&value) != '"')
        return stop(p, dp_fail(DP_EFORMAT, "%s: metadata '%s' is not a string (the format "
                               "allows only string values)", p->path, name));
    p->h->meta[p->h->meta_count++] = (st_meta_entry){name, value};
    return 0;
}

static int read_metadata(parser *p, dp_json value)
{
    if (p->saw_metadata)
        return dp_fail(DP_EFORMAT, "%s: duplicate key '%s'", p->path, METADATA_KEY);
    p->saw_metadata = 1;
    if (dp_json_is_null(value))
        return 0;
    int count = 0;
    dp_json walker = value;
    if (dp_json_peek(&walker) != '{' || dp_json_object(&walker, count_member, &count))
        return dp_fail(DP_EFORMAT, "%s: %s is not a JSON object of strings", p->path,
                       METADATA_KEY);
    p->h->meta = dp_calloc((size_t)count, sizeof *p->h->meta, "safetensors metadata");
    if (!p->h->meta)
        return DP_ENOMEM;
    if (dp_json_object(&value, add_meta_entry, p))
        return p->status ? p->status : dp_fail(DP_EFORMAT, "%s: malformed metadata", p->path);
    return 0;
}

static int read_dtype(parser *p, dp_json value)
{
    st_tensor *t = p->tensor;
    size_t len = 0;
    if (dp_json_peek(&value) != '"' ||
        dp_json_string(&value, t->dtype, sizeof t->dtype - 1, &len) || len >= sizeof t->dtype)
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' has no string dtype", p->path, t->name);
    t->dtype[len] = '\0';
    if (!st_dtype_size(t->dtype))
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' has dtype '%s', not a byte-sized "
                       "safetensors dtype this reader knows", p->path, t->name, t->dtype);
    return 0;
}

static int add_dimension(dp_json value, void *context)
{
    parser *p = context;
    int64_t dim = 0;
    if (dp_json_index(&value, &dim) || dp_json_peek(&value) != -1)
        return 1;
    if (p->tensor->ndim < DP_TENSOR_MAX_DIMS)
        p->tensor->dims[p->tensor->ndim] = dim;
    p->tensor->ndim++;
    if (p->numel_overflow || (dim != 0 && p->numel > INT64_MAX / dim))
        p->numel_overflow = 1;
    else
        p->numel *= dim;
    return 0;
}

static int read_shape(parser *p, dp_json value)
{
    p->tensor->ndim = 0;
    p->numel = 1;
    if (dp_json_peek(&value) != '[' || dp_json_array(&value, add_dimension, p))
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' has no valid shape (an array of non-negative integers)",
                       p->path, p->tensor->name);
    return 0;
}

typedef struct offsets {
    int64_t values[2];
    int count;
} offsets;

static int add_offset(dp_json value, void *context)
{
    offsets *o = context;
    int64_t v = 0;
    if (o->count == 2 || dp_json_index(&value, &v) || dp_json_peek(&value) != -1)
        return 1;
    o->values[o->count++] = v;
    return 0;
}

static int read_offsets(parser *p, dp_json value)
{
    offsets o = {{0, 0}, 0};
    if (dp_json_peek(&value) != '[' || dp_json_array(&value, add_offset, &o) || o.count != 2 ||
        o.values[0] > o.values[1])
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' has invalid data_offsets (expected [begin, end] with "
                       "0 <= begin <= end)",
                       p->path, p->tensor->name);
    p->tensor->begin = o.values[0];
    p->tensor->end = o.values[1];
    return 0;
}

/* One member of a tensor entry; unknown members are ignored, as the reference does. */
static int read_tensor_field(dp_json key, dp_json value, void *context)
{
    parser *p = context;
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    int (*const readers[])(parser *, dp_json) = {read_dtype, read_shape, read_offsets};
    int *const seen[] = {&p->seen_dtype, &p->seen_shape, &p->seen_offsets};
    char name[16];
    size_t len = 0;
    if (dp_json_string(&key, name, sizeof name, &len))
        return stop(p, dp_fail(DP_EFORMAT, "%s: malformed tensor entry", p->path));
    for (int i = 0; i < 3; i++) {
        if (len != strlen(fields[i]) || memcmp(name, fields[i], len) != 0)
            continue;
        if ((*seen[i])++)
            return stop(p, dp_fail(DP_EFORMAT, "%s: tensor '%s' has '%s' twice", p->path,
                                   p->tensor->name, fields[i]));
        int status = readers[i](p, value);
        return status ? stop(p, status) : 0;
    }
    return 0;
}

static int check_tensor_size(parser *p)
{
    st_tensor *t = p->tensor;
    if (!p->seen_dtype)
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' has no string dtype", p->path, t->name);
    if (!p->seen_shape)
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' has no valid shape (an array of non-negative integers)",
                       p->path, t->name);
    if (!p->seen_offsets)
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' has invalid data_offsets (expected [begin, end] with "
                       "0 <= begin <= end)", p->path, t->name);
    int64_t size = (int64_t)st_dtype_size(t->dtype);
    if (p->numel_overflow || p->numel > INT64_MAX / size)
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' has a shape whose byte size overflows",
                       p->path, t->name);
    if (t->end - t->begin != p->numel * size)
        return dp_fail(DP_EFORMAT,
                       "%s: tensor '%s' data_offsets [%" PRId64 ", %" PRId64 "] span %" PRId64
                       " bytes, expected %" PRId64 " for its shape",
                       p->path, t->name, t->begin, t->end, t->end - t->begin, p->numel * size);
    return 0;
}

static int read_tensor(parser *p, const char *name, dp_json value)
{
    st_tensor *t = &p->h->tensors[p->h->tensor_count++];
    memset(t, 0, sizeof *t);
    t->name = name;
    p->tensor = t;
    p->seen_dtype = p->seen_shape = p->seen_offsets = 0;
    p->numel = 1;
    p->numel_overflow = 0;
    if (dp_json_peek(&value) != '{')
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' entry is not a JSON object", p->path, name);
    if (dp_json_object(&value, read_tensor_field, p))
        return p->status ? p->status : dp_fail(DP_EFORMAT, "%s: malformed tensor entry", p->path);
    return check_tensor_size(p);
}

static int read_member(dp_json key, dp_json value, void *context)
{
    parser *p = context;
    size_t len = 0;
    const char *name = decode_key(p, key, "tensor name", &len);
    if (!name)
        return 1;
    int is_metadata = len == strlen(METADATA_KEY) && memcmp(name, METADATA_KEY, len) == 0;
    int status = is_metadata ? read_metadata(p, value) : read_tensor(p, name, value);
    return status ? stop(p, status) : 0;
}

static int compare_tensor_names(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int compare_meta_keys(const void *a, const void *b)
{
    return strcmp(((const st_meta_entry *)a)->key, ((const st_meta_entry *)b)->key);
}

static int check_unique(const char *path, const st_header *h)
{
    for (int i = 1; i < h->tensor_count; i++)
        if (strcmp(h->tensors[i - 1].name, h->tensors[i].name) == 0)
            return dp_fail(DP_EFORMAT, "%s: duplicate tensor name '%s' (the format forbids "
                           "duplicate keys; readers would disagree on which one counts)",
                           path, h->tensors[i].name);
    for (int i = 1; i < h->meta_count; i++)
        if (strcmp(h->meta[i - 1].key, h->meta[i].key) == 0)
            return dp_fail(DP_EFORMAT, "%s: duplicate metadata key '%s'", path, h->meta[i].key);
    return 0;
}

int st_header_parse(const char *path, const char *json, size_t len, int64_t data_size,
                    st_header *h)
{
    memset(h, 0, sizeof *h);
    h->data_size = data_size;
    dp_json root = {json, json + len}, c = root;
    if (!dp_json_is_utf8(json, len))
        return dp_fail(DP_EFORMAT, "%s: the header is not valid UTF-8", path);
    if (dp_json_skip_value(&c, 0) || dp_json_peek(&c) != -1) {
        int shown = (int)(c.end - c.pos < 24 ? c.end - c.pos : 24);
        return dp_fail(DP_EFORMAT, "%s: malformed JSON header at byte %td of %zu, near \"%.*s\"",
                       path, c.pos - json, len, shown, c.pos);
    }
    if (dp_json_peek(&root) != '{')
        return dp_fail(DP_EFORMAT, "%s: header is not a JSON object", path);
    int members = 0;
    c = root;
    dp_json_object(&c, count_member, &members);
    parser p = {.path = path, .h = h, .arena_size = len + 1};
    h->tensors = dp_calloc((size_t)members, sizeof *h->tensors, "safetensors header entries");
    h->names = dp_alloc(p.arena_size, "safetensors names");
    int status = h->tensors && h->names ? 0 : DP_ENOMEM;
    c = root;
    if (!status && dp_json_object(&c, read_member, &p))
        status = p.status ? p.status : dp_fail(DP_EFORMAT, "%s: malformed header", path);
    if (!status) {
        qsort(h->tensors, (size_t)h->tensor_count, sizeof *h->tensors, compare_tensor_names);
        if (h->meta_count) /* h->meta is NULL without metadata */
            qsort(h->meta, (size_t)h->meta_count, sizeof *h->meta, compare_meta_keys);
        status = check_unique(path, h);
    }
    if (status)
        st_header_free(h);
    return status;
}

/* --- layout of the data section --- */

static int compare_ranges(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int check_ranges(const char *path, const st_header *h, const st_tensor **by_offset)
{
    for (int i = 0; i < h->tensor_count; i++) {
        const st_tensor *t = &h->tensors[i];
        if (t->end > h->data_size)
            return dp_fail(DP_EFORMAT,
                           "%s: tensor '%s' data_offsets [%" PRId64 ", %" PRId64
                           "] extend past the %" PRId64 "-byte data section (truncated file?)",
                           path, t->name, t->begin, t->end, h->data_size);
        by_offset[i] = t;
    }
    qsort(by_offset, (size_t)h->tensor_count, sizeof *by_offset, compare_ranges);
    int64_t covered = 0;
    for (int i = 0; i < h->tensor_count; i++) {
        const st_tensor *t = by_offset[i];
        if (t->begin < covered)
            return dp_fail(DP_EFORMAT,
                           "%s: tensors '%s' [%" PRId64 ", %" PRId64 "] and '%s' [%" PRId64
                           ", %" PRId64 "] overlap in the data section",
                           path, by_offset[i - 1]->name, by_offset[i - 1]->begin,
                           by_offset[i - 1]->end, t->name, t->begin, t->end);
        if (t->begin > covered)
            return dp_fail(DP_EFORMAT,
                           "%s: bytes [%" PRId64 ", %" PRId64 ") of the data section belong to "
                           "no tensor (a hole)", path, covered, t->begin);
        covered = t->end;
    }
    if (covered < h->data_size)
        return dp_fail(DP_EFORMAT,
                       "%s: %" PRId64 " bytes follow the last tensor's data (trailing bytes; "
                       "the data section must be exactly the tensors)",
                       path, h->data_size - covered);
    return 0;
}

int st_header_check_layout(const char *path, const st_header *h)
{
    const st_tensor **by_offset = dp_calloc((size_t)h->tensor_count, sizeof *by_offset,
                                            "safetensors data layout");
    if (!by_offset)
        return DP_ENOMEM;
    int status = check_ranges(path, h, by_offset);
    free(by_offset);
    return status;
}

/* --- lookups --- */

const st_tensor *st_header_tensor(const st_header *h, const char *name)
{
    st_tensor key = {.name = name};
    return h->tensor_count ? bsearch(&key, h->tensors, (size_t)h->tensor_count,
                                     sizeof *h->tensors, compare_tensor_names)
                           : NULL;
}

dp_json st_header_metadata(const st_header *h, const char *key)
{
    st_meta_entry wanted = {.key = key};
    const st_meta_entry *hit =
        h->meta_count ? bsearch(&wanted, h->meta, (size_t)h->meta_count, sizeof *h->meta,
                                compare_meta_keys)
                      : NULL;
    return hit ? hit->value : (dp_json){NULL, NULL};
}

void st_header_free(st_header *h)
{
    free(h->tensors);
    free(h->meta);
    free(h->names);
    memset(h, 0, sizeof *h);
}
