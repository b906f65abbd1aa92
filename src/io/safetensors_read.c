#include "dp/safetensors.h"

#include "dp/error.h"
#include "dp/input_file.h"
#include "src/io/safetensors_format.h"
#include "src/io/safetensors_header.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SHAPE_TEXT_MAX (DP_TENSOR_MAX_DIMS * 22 + 3)
/* The data section is checksummed in pieces of this size when verifying. */
#define CRC_READ_PIECE ((size_t)1 << 20)

static uint64_t decode_u64le(const unsigned char in[ST_PREFIX_BYTES])
{
    uint64_t value = 0;
    for (int i = 0; i < ST_PREFIX_BYTES; i++)
        value |= (uint64_t)in[i] << (8 * i);
    return value;
}

/* --- reading --- */

static int read_exact(FILE *f, const char *path, void *buf, size_t len)
{
    if (len == 0 || fread(buf, 1, len, f) == len)
        return 0;
    if (ferror(f))
        return dp_fail(DP_EIO, "%s: read failed: %s", path, strerror(errno));
    return dp_fail(DP_EFORMAT, "%s: file ends unexpectedly", path);
}

/* One open file's framing: the header bytes (owned) and the size of the data after them. */
typedef struct st_framing {
    unsigned char prefix[ST_PREFIX_BYTES];
    char *json;
    size_t json_len;
    int64_t data_size;
} st_framing;

static int read_framing(FILE *f, const char *path, st_framing *fr)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        return dp_fail(DP_EIO, "%s: cannot stat: %s", path, strerror(errno));
    int64_t file_size = (int64_t)st.st_size;
    if (file_size < ST_PREFIX_BYTES)
        return dp_fail(DP_EFORMAT, "%s: file of %" PRId64 " bytes is too short for a "
                       "safetensors header", path, file_size);
    int rc = read_exact(f, path, fr->prefix, sizeof fr->prefix);
    if (rc)
        return rc;
    uint64_t len = decode_u64le(fr->prefix);
    if (len > ST_MAX_HEADER_BYTES)
        return dp_fail(DP_EFORMAT, "%s: header length %" PRIu64 " exceeds the %u-byte limit",
                       path, len, ST_MAX_HEADER_BYTES);
    if (len > (uint64_t)(file_size - ST_PREFIX_BYTES))
        return dp_fail(DP_EFORMAT, "%s: header length %" PRIu64 " extends past the end of the "
                       "%" PRId64 "-byte file", path, len, file_size);
    fr->json = dp_alloc((size_t)len, "safetensors header");
    if (!fr->json)
        return DP_ENOMEM;
    fr->json_len = (size_t)len;
    fr->data_size = file_size - ST_PREFIX_BYTES - (int64_t)len;
    return read_exact(f, path, fr->json, fr->json_len);
}

static int check_dtype(const char *path, const dp_tensor_ref *t, const st_tensor *found)
{
    const char *wanted = dp_dtype_name(t->dtype);
    if (strcmp(found->dtype, wanted) == 0)
        return 0;
    return dp_fail(DP_EFORMAT, "%s: tensor '%s' has dtype %s, expected %s", path, t->name,
                   found->dtype, wanted);
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

static int check_shape(const char *path, const dp_tensor_ref *t, const st_tensor *found)
{
    if (found->ndim == t->ndim &&
        memcmp(found->dims, t->shape, (size_t)t->ndim * sizeof *t->shape) == 0)
        return 0;
    char expected[SHAPE_TEXT_MAX];
    format_shape(t->shape, t->ndim, expected);
    if (found->ndim > DP_TENSOR_MAX_DIMS)
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' has %d dimensions, expected shape %s", path,
                       t->name, found->ndim, expected);
    char shape[SHAPE_TEXT_MAX];
    format_shape(found->dims, found->ndim, shape);
    return dp_fail(DP_ESHAPE, "%s: tensor '%s' has shape %s, expected %s", path, t->name, shape,
                   expected);
}

/* Checks t's header entry; *begin gets its offset into the data section. */
static int locate_tensor(const char *path, const st_header *h, const dp_tensor_ref *t,
                         int64_t *begin)
{
    const st_tensor *found = st_header_tensor(h, t->name);
    if (!found)
        return dp_fail(DP_EFORMAT, "%s: tensor '%s' not found", path, t->name);
    int rc = check_dtype(path, t, found);
    if (rc == 0)
        rc = check_shape(path, t, found);
    *begin = found->begin;
    return rc;
}

/* The part's bytes alone: its first element's offset within the tensor's range. */
static int read_part_data(FILE *f, const char *path, int64_t data_start, const dp_tensor_part *p,
                          int64_t begin)
{
    int64_t element = (int64_t)dp_dtype_size(p->ref.dtype);
    if (fseeko(f, (off_t)(data_start + begin + (int64_t)p->first * element), SEEK_SET) != 0)
        return dp_fail(DP_EIO, "%s: seek failed: %s", path, strerror(errno));
    return read_exact(f, path, p->ref.data, p->count * (size_t)element);
}

static int read_metadata_value(const char *path, const st_header *h, dp_meta *entry)
{
    size_t len = 0;
    entry->value[0] = '\0';
    dp_json value = st_header_metadata(h, entry->key);
    if (!value.pos)
        return 0;
    if (dp_json_string(&value, entry->value, sizeof entry->value - 1, &len) ||
        len >= sizeof entry->value)
        return dp_fail(DP_EFORMAT, "%s: metadata '%s' is not a string of at most %zu bytes",
                       path, entry->key, sizeof entry->value - 1);
    entry->value[len] = '\0';
    return 0;
}

/* Every entry is checked before any data is read, so a malformed file leaves the parts as
 * they were; only an I/O error midway can leave them partly filled. */
/* A file's tensors that no part asks for and whose names do not start with `ignored`, named in
 * one message: PyTorch's strict load refuses them too. */
static int check_all_asked(const char *path, const st_header *h, const dp_tensor_part *parts, int count,
                           const char *ignored)
{
    char unused[512] = "";
    size_t used = 0;
    int found = 0;
    for (int t = 0; t < h->tensor_count; t++) {
        const char *name = h->tensors[t].name;
        int asked = ignored && strncmp(name, ignored, strlen(ignored)) == 0;
        for (int i = 0; !asked && i < count; i++)
            asked = strcmp(parts[i].ref.name, name) == 0;
        if (asked)
            continue;
        if (found++ < 8 && used < sizeof unused)
            used += (size_t)snprintf(unused + used, sizeof unused - used, "%s%s", used ? ", " : "", name);
    }
    if (!found)
        return 0;
    return dp_fail(DP_EFORMAT, "%s holds %d tensor%s the model has no place for (%s%s): a file of another model; "
                   "PyTorch's load_state_dict(strict=True) refuses it too", path, found, found == 1 ? "" : "s",
                   unused, found > 8 ? ", ..." : "");
}

/* strict: every tensor of the file must be asked for, but those whose names start with `ignored`. */
static int read_parts(FILE *f, const char *path, const dp_tensor_part *parts, int count,
                      dp_meta *meta, int meta_count, int strict, const char *ignored)
{
    st_framing fr = {0};
    st_header h = {0};
    int64_t *begins = dp_calloc((size_t)(count ? count : 1), sizeof *begins, "tensor offsets");
    int rc = begins ? read_framing(f, path, &fr) : DP_ENOMEM;
    if (rc == 0)
        rc = st_header_parse(path, fr.json, fr.json_len, fr.data_size, &h);
    for (int i = 0; rc == 0 && i < count; i++)
        rc = locate_tensor(path, &h, &parts[i].ref, &begins[i]);
    if (rc == 0)
        rc = st_header_check_layout(path, &h);
    if (rc == 0 && strict)
        rc = check_all_asked(path, &h, parts, count, ignored);
    for (int i = 0; rc == 0 && i < meta_count; i++)
        rc = read_metadata_value(path, &h, &meta[i]);
    int64_t data_start = ST_PREFIX_BYTES + (int64_t)fr.json_len;
    for (int i = 0; rc == 0 && i < count; i++)
        rc = read_part_data(f, path, data_start, &parts[i], begins[i]);
    st_header_free(&h);
    free(fr.json);
    free(begins);
    return rc;
}

/* Each part's tensor as a reference would be (its data the part's), and the part within it. */
static int check_parts(const char *path, const dp_tensor_part *parts, int count)
{
    if (count < 0 || (count > 0 && !parts))
        return dp_fail(DP_EINVAL, "%s: invalid tensor list (count %d)", path, count);
    for (int i = 0; i < count; i++) {
        int rc = st_check_tensor_ref(path, &parts[i].ref, i, (int64_t)parts[i].count);
        size_t numel = rc ? 0 : (size_t)dp_tensor_numel(&parts[i].ref);
        if (rc)
            return rc;
        if (parts[i].first > numel || parts[i].count > numel - parts[i].first)
            return dp_fail(DP_EINVAL, "%s: elements [%zu, %zu) asked of tensor '%s', which has %zu", path,
                           parts[i].first, parts[i].first + parts[i].count, parts[i].ref.name, numel);
    }
    return 0;
}

static int open_and_read_parts(const char *path, dp_tensor_part *parts, int count, dp_meta *meta, int meta_count,
                               int strict, const char *ignored)
{
    int rc = check_parts(path, parts, count);
    if (rc)
        return rc;
    FILE *f = NULL;
    if ((rc = dp_open_input(path, &f)) != 0)
        return rc;
    rc = read_parts(f, path, parts, count, meta, meta_count, strict, ignored);
    fclose(f);
    return rc;
}

int dp_safetensors_read_parts(const char *path, dp_tensor_part *parts, int count, dp_meta *meta,
                              int meta_count)
{
    return open_and_read_parts(path, parts, count, meta, meta_count, 0, NULL);
}

int dp_safetensors_read_parts_strict(const char *path, dp_tensor_part *parts, int count, const char *ignored)
{
    return open_and_read_parts(path, parts, count, NULL, 0, 1, ignored);
}

int dp_safetensors_read_with_metadata(const char *path, dp_tensor_ref *expected, int count,
                                      dp_meta *meta, int meta_count)
{
    int rc = st_check_tensor_refs(path, expected, count);
    if (rc)
        return rc;
    dp_tensor_part *parts = dp_calloc((size_t)(count ? count : 1), sizeof *parts, "the tensor list");
    if (!parts)
        return DP_ENOMEM;
    for (int i = 0; i < count; i++)
        parts[i] = (dp_tensor_part){expected[i], 0, (size_t)dp_tensor_numel(&expected[i])};
    rc = dp_safetensors_read_parts(path, parts, count, meta, meta_count);
    free(parts);
    return rc;
}

int dp_safetensors_tensor_shape(const char *path, const char *name, int *ndim, int64_t *dims)
{
    FILE *f = NULL;
    int rc = dp_open_input(path, &f);
    if (rc)
        return rc;
    st_framing fr = {0};
    st_header h = {0};
    rc = read_framing(f, path, &fr);
    fclose(f);
    if (rc == 0)
        rc = st_header_parse(path, fr.json, fr.json_len, fr.data_size, &h);
    const st_tensor *t = rc ? NULL : st_header_tensor(&h, name);
    if (rc == 0 && !t)
        rc = dp_fail(DP_EFORMAT, "%s has no tensor '%s'", path, name);
    if (t) {
        *ndim = t->ndim;
        for (int d = 0; d < t->ndim && d < DP_TENSOR_MAX_DIMS; d++)
            dims[d] = t->dims[d];
    }
    st_header_free(&h);
    free(fr.json);
    return rc;
}

int dp_safetensors_read(const char *path, dp_tensor_ref *expected, int count)
{
    return dp_safetensors_read_with_metadata(path, expected, count, NULL, 0);
}

/* --- verifying the file's own CRC-32 --- */

/* Where the digits of the crc_key entry lie in the header, and their value. */
static int find_crc(const char *path, const st_framing *fr, const st_header *h,
                    const char *crc_key, size_t *digits_at, unsigned long *stated)
{
    dp_json value = st_header_metadata(h, crc_key);
    if (!value.pos)
        return dp_fail(DP_EFORMAT, "%s: no '%s' metadata: the file carries no checksum of itself",
                       path, crc_key);
    dp_json_peek(&value);
    size_t prefix_len = strlen(DP_SAFETENSORS_CRC_PREFIX);
    const char *text = value.pos + 1;
    if ((size_t)(value.end - value.pos) != prefix_len + ST_CRC_DIGITS + 2 ||
        memcmp(text, DP_SAFETENSORS_CRC_PREFIX, prefix_len) != 0 ||
        strspn(text + prefix_len, "0123456789abcdef") < ST_CRC_DIGITS)
        return dp_fail(DP_EFORMAT, "%s: metadata '%s' is not \"%s\" and 8 hex digits", path,
                       crc_key, DP_SAFETENSORS_CRC_PREFIX);
    *digits_at = (size_t)(text + prefix_len - fr->json);
    *stated = strtoul(text + prefix_len, NULL, 16);
    return 0;
}

static int data_crc(FILE *f, const char *path, int64_t size, unsigned long *crc)
{
    unsigned char *piece = dp_alloc(CRC_READ_PIECE, "checksum buffer");
    if (!piece)
        return DP_ENOMEM;
    int rc = 0;
    for (int64_t left = size; rc == 0 && left > 0;) {
        size_t n = left > (int64_t)CRC_READ_PIECE ? CRC_READ_PIECE : (size_t)left;
        rc = read_exact(f, path, piece, n);
        *crc = st_crc_update(*crc, piece, n);
        left -= (int64_t)n;
    }
    free(piece);
    return rc;
}

static int verify_crc(FILE *f, const char *path, const char *crc_key)
{
    st_framing fr = {0};
    st_header h = {0};
    size_t digits_at = 0;
    unsigned long stated = 0;
    int rc = read_framing(f, path, &fr);
    if (rc == 0)
        rc = st_header_parse(path, fr.json, fr.json_len, fr.data_size, &h);
    if (rc == 0)
        rc = st_header_check_layout(path, &h);
    if (rc == 0)
        rc = find_crc(path, &fr, &h, crc_key, &digits_at, &stated);
    if (rc == 0) {
        memcpy(fr.json + digits_at, ST_CRC_BLANK, ST_CRC_DIGITS);
        unsigned long crc = st_crc_update(st_crc_start(), fr.prefix, ST_PREFIX_BYTES);
        crc = st_crc_update(crc, fr.json, fr.json_len);
        rc = data_crc(f, path, fr.data_size, &crc);
        if (rc == 0 && crc != stated)
            rc = dp_fail(DP_EFORMAT, "%s: checksum mismatch (the file says %08lx, its bytes give "
                         "%08lx): the file is corrupt", path, stated, crc);
    }
    st_header_free(&h);
    free(fr.json);
    return rc;
}

int dp_safetensors_verify_crc(const char *path, const char *crc_key)
{
    FILE *f = NULL;
    int rc = dp_open_input(path, &f);
    if (rc)
        return rc;
    rc = verify_crc(f, path, crc_key);
    fclose(f);
    return rc;
}
