#include "dp/data.h"

#include "dp/atomic_file.h"
#include "dp/error.h"
#include "dp/input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_PREAMBLE_LEN (NPY_MAGIC_LEN + 2)
/* numpy itself refuses headers over 10000 bytes by default; this leaves ample room. */
#define NPY_MAX_HEADER_LEN ((uint32_t)1 << 20)
#define NPY_SUPPORTED_DTYPES "'<f4' float32, '<i4' int32, '<i8' int64"

static const struct npy_dtype_info {
    const char *descr;
    const char *name;
    enum dp_npy_dtype dtype;
    size_t size;
} npy_dtypes[] = {
    {"<f4", "float32", DP_NPY_F32, 4},
    {"<i4", "int32", DP_NPY_I32, 4},
    {"<i8", "int64", DP_NPY_I64, 8},
};

static const struct npy_dtype_info *dtype_info(enum dp_npy_dtype dtype)
{
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof npy_dtypes[0]; i++)
        if (npy_dtypes[i].dtype == dtype)
            return &npy_dtypes[i];
    return NULL;
}

static const struct npy_dtype_info *dtype_by_descr(const char *descr)
{
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof npy_dtypes[0]; i++)
        if (strcmp(npy_dtypes[i].descr, descr) == 0)
            return &npy_dtypes[i];
    return NULL;
}

/* --- header: a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), } --- */

typedef struct npy_header {
    char descr[16];
    int fortran_order;
    int ndim;           /* may exceed DP_NPY_MAX_DIMS here; rejected after parsing, naming the shape */
    size_t shape[DP_NPY_MAX_DIMS];
    const char *shape_text; /* "(...)" inside the header, for messages */
    int shape_text_len;
    int seen_descr, seen_fortran_order, seen_shape;
} npy_header;

typedef struct header_parser {
    const char *path;
    const char *pos;
} header_parser;

static int malformed(const header_parser *p, const char *what)
{
    if (!*p->pos) /* the text ends here: at its end, or at a NUL byte within it */
        return dp_fail(DP_EFORMAT, "%s: malformed .npy header: %s at the header's end (or a NUL byte)", p->path, what);
    return dp_fail(DP_EFORMAT, "%s: malformed .npy header: %s at \"%.24s\"", p->path, what,
                   p->pos);
}

static void skip_space(header_parser *p)
{
    while (*p->pos == ' ' || *p->pos == '\t' || *p->pos == '\n' || *p->pos == '\r')
        p->pos++;
}

static int expect_char(header_parser *p, char c)
{
    skip_space(p);
    if (*p->pos != c) {
        char what[24];
        snprintf(what, sizeof what, "expected '%c'", c);
        return malformed(p, what);
    }
    p->pos++;
    return 0;
}

static int parse_string(header_parser *p, char *buf, size_t size)
{
    skip_space(p);
    char quote = *p->pos;
    if (quote != '\'' && quote != '"')
        return malformed(p, "expected a quoted string");
    const char *end = strchr(p->pos + 1, quote);
    if (!end)
        return malformed(p, "unterminated string");
    size_t len = (size_t)(end - p->pos - 1);
    if (len >= size)
        return malformed(p, "string too long");
    memcpy(buf, p->pos + 1, len);
    buf[len] = '\0';
    p->pos = end + 1;
    return 0;
}

static int parse_bool(header_parser *p, int *value)
{
    skip_space(p);
    if (strncmp(p->pos, "True", 4) == 0) {
        *value = 1;
        p->pos += 4;
    } else if (strncmp(p->pos, "False", 5) == 0) {
        *value = 0;
        p->pos += 5;
    } else {
        return malformed(p, "expected True or False");
    }
    return 0;
}

static int parse_size(header_parser *p, size_t *value)
{
    skip_space(p);
    if (*p->pos < '0' || *p->pos > '9')
        return malformed(p, "expected a dimension");
    size_t v = 0;
    for (; *p->pos >= '0' && *p->pos <= '9'; p->pos++) {
        size_t digit = (size_t)(*p->pos - '0');
        if (v > (SIZE_MAX - digit) / 10)
            return malformed(p, "dimension too large");
        v = v * 10 + digit;
    }
    *value = v;
    return 0;
}

/* A tuple: "()", "(5,)", "(3, 4)"; a trailing comma is optional after the last item. */
static int parse_shape(header_parser *p, npy_header *h)
{
    int rc = expect_char(p, '(');
    if (rc)
        return rc;
    h->shape_text = p->pos - 1;
    h->ndim = 0;
    for (;;) {
        skip_space(p);
        if (*p->pos == ')')
            break;
        size_t dim = 0;
        if ((rc = parse_size(p, &dim)) != 0)
            return rc;
        if (h->ndim < DP_NPY_MAX_DIMS)
            h->shape[h->ndim] = dim;
        h->ndim++;
        skip_space(p);
        if (*p->pos == ',')
            p->pos++;
        else if (*p->pos != ')')
            return malformed(p, "expected ',' or ')' in shape");
    }
    p->pos++;
    h->shape_text_len = (int)(p->pos - h->shape_text);
    return 0;
}

static int parse_entry(header_parser *p, npy_header *h)
{
    char key[32];
    int rc = parse_string(p, key, sizeof key);
    if (!rc)
        rc = expect_char(p, ':');
    if (rc)
        return rc;
    if (strcmp(key, "descr") == 0) {
        h->seen_descr = 1;
        return parse_string(p, h->descr, sizeof h->descr);
    }
    if (strcmp(key, "fortran_order") == 0) {
        h->seen_fortran_order = 1;
        return parse_bool(p, &h->fortran_order);
    }
    if (strcmp(key, "shape") == 0) {
        h->seen_shape = 1;
        return parse_shape(p, h);
    }
    return dp_fail(DP_EFORMAT, "%s: malformed .npy header: unexpected key '%s'", p->path, key);
}

static int parse_header(const char *path, const char *text, npy_header *h)
{
    header_parser p = {path, text};
    int rc = expect_char(&p, '{');
    skip_space(&p);
    while (!rc && *p.pos != '}') {
        rc = parse_entry(&p, h);
        skip_space(&p);
        if (!rc && *p.pos == ',') {
            p.pos++;
            skip_space(&p);
        } else if (!rc && *p.pos != '}') {
            rc = malformed(&p, "expected ',' or '}'");
        }
    }
    if (rc)
        return rc;
    p.pos++;
    skip_space(&p);
    if (*p.pos != '\0')
        return malformed(&p, "unexpected text after the dictionary");
    const char *missing = !h->seen_descr           ? "descr"
                          : !h->seen_fortran_order ? "fortran_order"
                          : !h->seen_shape         ? "shape"
                                                   : NULL;
    if (missing)
        return dp_fail(DP_EFORMAT, "%s: malformed .npy header: missing key '%s'", path, missing);
    return 0;
}

static int check_header(const char *path, const npy_header *h,
                        const struct npy_dtype_info **info)
{
    *info = dtype_by_descr(h->descr);
    if (!*info)
        return dp_fail(DP_EFORMAT, "%s: dtype '%s' is not supported (supported: %s)", path,
                       h->descr, NPY_SUPPORTED_DTYPES);
    if (h->fortran_order)
        return dp_fail(DP_EFORMAT,
                       "%s: fortran_order True (column-major) arrays are not supported; save a "
                       "C-ordered array, e.g. with numpy.ascontiguousarray",
                       path);
    if (h->ndim < 1 || h->ndim > DP_NPY_MAX_DIMS)
        return dp_fail(DP_EFORMAT,
                       "%s: shape %.*s has %d dimensions; only 1-D to %d-D arrays are supported",
                       path, h->shape_text_len, h->shape_text, h->ndim, DP_NPY_MAX_DIMS);
    return 0;
}

/* --- file --- */

static int read_exact(FILE *f, const char *path, void *buf, size_t len, const char *what)
{
    if (fread(buf, 1, len, f) == len)
        return 0;
    if (ferror(f))
        return dp_fail(DP_EIO, "%s: read failed: %s", path, strerror(errno));
    return dp_fail(DP_EFORMAT, "%s: truncated %s", path, what);
}

static uint32_t le_uint(const uint8_t *bytes, int len)
{
    uint32_t v = 0;
    for (int i = len - 1; i >= 0; i--)
        v = v << 8 | bytes[i];
    return v;
}

/* Reads the preamble and header text; *data_offset is where the array data starts. The header
 * length is checked against the file's size before the text is allocated. */
static int read_header_text(FILE *f, const char *path, off_t file_size, char **text,
                            size_t *data_offset)
{
    uint8_t preamble[NPY_PREAMBLE_LEN];
    int rc = read_exact(f, path, preamble, sizeof preamble, "header");
    if (rc)
        return rc;
    if (memcmp(preamble, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return dp_fail(DP_EFORMAT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    int major = preamble[NPY_MAGIC_LEN], minor = preamble[NPY_MAGIC_LEN + 1];
    if (major < 1 || major > 3)
        return dp_fail(DP_EFORMAT, "%s: .npy format version %d.%d is not supported (1.0 to 3.0)",
                       path, major, minor);
    /* Version 1 stores the header length in 2 bytes, versions 2 and 3 in 4. */
    int len_bytes = major == 1 ? 2 : 4;
    uint8_t len_field[4];
    if ((rc = read_exact(f, path, len_field, (size_t)len_bytes, "header")) != 0)
        return rc;
    uint32_t header_len = le_uint(len_field, len_bytes);
    if (header_len > NPY_MAX_HEADER_LEN)
        return dp_fail(DP_EFORMAT, "%s: header length %u is implausibly large", path,
                       (unsigned)header_len);
    *data_offset = NPY_PREAMBLE_LEN + (size_t)len_bytes + header_len;
    if ((off_t)*data_offset > file_size)
        return dp_fail(DP_EFORMAT,
                       "%s: header length %u extends past the end of the %lld-byte file", path,
                       (unsigned)header_len, (long long)file_size);
    *text = dp_alloc((size_t)header_len + 1, ".npy header");
    if (!*text)
        return DP_ENOMEM;
    if ((rc = read_exact(f, path, *text, header_len, "header")) != 0) {
        free(*text);
        *text = NULL;
        return rc;
    }
    (*text)[header_len] = '\0';
    return 0;
}

static int array_bytes(const char *path, const npy_header *h, size_t elem_size, size_t *bytes)
{
    size_t n = elem_size;
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] != 0 && n > SIZE_MAX / h->shape[i])
            return dp_fail(DP_EFORMAT, "%s: shape %.*s is too large to address", path,
                           h->shape_text_len, h->shape_text);
        n *= h->shape[i];
    }
    *bytes = n;
    return 0;
}

/* The file is little-endian; decoding byte by byte keeps this correct on any host. */
void dp_npy_from_little_endian(void *data, size_t bytes, enum dp_npy_dtype dtype)
{
    size_t elem_size = dtype_info(dtype)->size;
    for (uint8_t *p = data; p < (uint8_t *)data + bytes; p += elem_size) {
        if (elem_size == 4) {
            uint32_t v = le_uint(p, 4);
            memcpy(p, &v, 4);
        } else {
            uint64_t v = (uint64_t)le_uint(p + 4, 4) << 32 | le_uint(p, 4);
            memcpy(p, &v, 8);
        }
    }
}

/* Where an array lies in its file, checked: the header parsed, the data exactly the rest. */
typedef struct npy_layout {
    const struct npy_dtype_info *info;
    npy_header header;
    size_t data_offset, bytes;
} npy_layout;

static int read_layout(FILE *f, const char *path, off_t file_size, npy_layout *layout)
{
    char *text = NULL;
    int rc = read_header_text(f, path, file_size, &text, &layout->data_offset);
    if (rc)
        return rc;
    npy_header *h = &layout->header;
    rc = parse_header(path, text, h);
    if (!rc)
        rc = check_header(path, h, &layout->info);
    if (!rc)
        rc = array_bytes(path, h, layout->info->size, &layout->bytes);
    free(text);
    if (rc)
        return rc;
    size_t available = (size_t)file_size - layout->data_offset;
    if (available < layout->bytes)
        return dp_fail(DP_EFORMAT, "%s: truncated: expected %zu bytes of data, got %zu", path,
                       layout->bytes, available);
    /* Extra bytes mean the header's shape does not describe the file, so they are an error. */
    if (available > layout->bytes)
        return dp_fail(DP_EFORMAT, "%s: %zu unexpected bytes after the %zu bytes of data",
                       path, available - layout->bytes, layout->bytes);
    return 0;
}

/* Dimensions past ndim are 1, so a row's width is the product of shape[1..] whatever ndim is. */
static void describe(const npy_layout *layout, void *data, dp_npy *out)
{
    out->dtype = layout->info->dtype;
    out->ndim = layout->header.ndim;
    for (int i = 0; i < DP_NPY_MAX_DIMS; i++)
        out->shape[i] = i < out->ndim ? layout->header.shape[i] : 1;
    out->data = data;
}

static int read_array(FILE *f, const char *path, off_t file_size, void *out)
{
    npy_layout layout = {0};
    int rc = read_layout(f, path, file_size, &layout);
    if (rc)
        return rc;
    void *data = dp_alloc(layout.bytes, ".npy data");
    if (!data)
        return DP_ENOMEM;
    if ((rc = read_exact(f, path, data, layout.bytes, "data")) != 0) {
        free(data);
        return rc;
    }
    dp_npy_from_little_endian(data, layout.bytes, layout.info->dtype);
    describe(&layout, data, out);
    return 0;
}

/* Opens path and runs `use` on it with its size: reading and opening share the checks. */
static int with_input(const char *path, int (*use)(FILE *, const char *, off_t, void *), void *out)
{
    FILE *f = NULL;
    int rc = dp_open_input(path, &f);
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        rc = dp_fail(DP_EIO, "%s: cannot stat: %s", path, strerror(errno));
    if (!rc)
        rc = use(f, path, st.st_size, out);
    fclose(f);
    return rc;
}

int dp_npy_read(const char *path, dp_npy *out)
{
    memset(out, 0, sizeof *out);
    return with_input(path, read_array, out);
}

/* The file stays open (a descriptor of its own, close-on-exec) for rows read on demand. */
static int open_into(FILE *f, const char *path, off_t file_size, void *out)
{
    dp_npy_file *file = out;
    npy_layout layout = {0};
    int rc = read_layout(f, path, file_size, &layout);
    if (rc)
        return rc;
    int fd = fcntl(fileno(f), F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return dp_fail(DP_EIO, "%s: cannot keep the file open: %s", path, strerror(errno));
    file->fd = fd;
    file->data_offset = layout.data_offset;
    describe(&layout, NULL, &file->array);
    return 0;
}

int dp_npy_open(const char *path, dp_npy_file *out)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    return with_input(path, open_into, out);
}

void dp_npy_close(dp_npy_file *file)
{
    if (file->fd >= 0)
        close(file->fd);
    memset(file, 0, sizeof *file);
    file->fd = -1;
}

void dp_npy_free(dp_npy *npy)
{
    free(npy->data);
    memset(npy, 0, sizeof *npy);
}

const char *dp_npy_dtype_name(enum dp_npy_dtype dtype)
{
    return dtype_info(dtype)->name;
}

void dp_npy_format_shape(const dp_npy *array, char *buf, size_t size)
{
    int used = snprintf(buf, size, "(");
    for (int i = 0; i < array->ndim && used > 0 && (size_t)used < size; i++)
        used += snprintf(buf + used, size - (size_t)used, i ? ", %zu" : "%zu", array->shape[i]);
    if (used > 0 && (size_t)used < size)
        snprintf(buf + used, size - (size_t)used, array->ndim == 1 ? ",)" : ")");
}

/* --- writing: format 1.0, the header padded so the data starts 64-byte aligned, as numpy
 * writes it --- */

typedef struct npy_file {
    const char *header;
    size_t header_len;
    const void *data;
    size_t data_bytes;
} npy_file;

static int write_npy_contents(FILE *f, const void *context)
{
    const npy_file *file = context;
    uint8_t preamble[NPY_PREAMBLE_LEN + 2] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                              (uint8_t)(file->header_len & 0xff), (uint8_t)(file->header_len >> 8)};
    if (fwrite(preamble, 1, sizeof preamble, f) != sizeof preamble ||
        fwrite(file->header, 1, file->header_len, f) != file->header_len ||
        (file->data_bytes && fwrite(file->data, 1, file->data_bytes, f) != file->data_bytes))
        return -1;
    return 0;
}

int dp_npy_write(const char *path, const dp_npy *array)
{
    const struct npy_dtype_info *info = dtype_info(array->dtype);
    char shape[128], header[256];
    dp_npy_format_shape(array, shape, sizeof shape);
    int len = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       info->descr, shape);
    /* Spaces, then a newline, up to a multiple of 64 bytes including the 10-byte preamble. */
    size_t total = ((size_t)len + 1 + NPY_PREAMBLE_LEN + 2 + 63) / 64 * 64 - NPY_PREAMBLE_LEN - 2;
    memset(header + len, ' ', total - (size_t)len - 1);
    header[total - 1] = '\n';
    size_t count = 1;
    for (int i = 0; i < array->ndim; i++)
        count *= array->shape[i];
    npy_file file = {header, total, array->data, count * info->size};
    return dp_write_file_atomically(path, write_npy_contents, &file);
}
