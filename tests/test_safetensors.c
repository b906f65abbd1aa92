#include "dp/error.h"
#include "dp/safetensors.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Python: safetensors.numpy.save({"layers.0.weight": [[1, 2], [3, 4]], "layers.0.bias": [5, 6]})
 * with float32 arrays; the reference sorts keys, so bias comes first in header and data. */
static const unsigned char REFERENCE_PREFIX[8] = {0x88, 0, 0, 0, 0, 0, 0, 0};
static const char REFERENCE_HEADER[] =
    "{\"layers.0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]}}";
static const unsigned char REFERENCE_DATA[] = {
    0x00, 0x00, 0xa0, 0x40, 0x00, 0x00, 0xc0, 0x40, /* 5, 6 */
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, /* 1, 2 */
    0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40, /* 3, 4 */
};

/* Python: safetensors.numpy.save({"a": np.zeros(1, np.float32)},
 *                                metadata={'k"\\': "v\n\x01\x7f"}): metadata first, serde_json
 * escapes, and four spaces of padding. */
static const unsigned char PADDED_PREFIX[8] = {0x60, 0, 0, 0, 0, 0, 0, 0};
static const char PADDED_HEADER[] =
    "{\"__metadata__\":{\"k\\\"\\\\\":\"v\\n\\u0001\x7f\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}    ";

/* The fixture for malformed-file tests: one tensor "w" of shape [2, 2] over 16 data bytes. */
static const char VALID_W_HEADER[] =
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";

typedef struct mlp_params {
    float w0[15], b0[3], w1[6], b1[2];
} mlp_params;

static void mlp_refs(mlp_params *p, dp_tensor_ref refs[4])
{
    refs[0] = (dp_tensor_ref){.name = "layers.0.weight", .ndim = 2, .shape = {3, 5}, .data = p->w0};
    refs[1] = (dp_tensor_ref){.name = "layers.0.bias", .ndim = 1, .shape = {3}, .data = p->b0};
    refs[2] = (dp_tensor_ref){.name = "layers.1.weight", .ndim = 2, .shape = {2, 3}, .data = p->w1};
    refs[3] = (dp_tensor_ref){.name = "layers.1.bias", .ndim = 1, .shape = {2}, .data = p->b1};
}

static void fill_distinct(mlp_params *p)
{
    dp_tensor_ref refs[4];
    mlp_refs(p, refs);
    float next = -2.5f;
    for (int t = 0; t < 4; t++)
        for (int64_t i = 0; i < dp_tensor_numel(&refs[t]); i++, next += 0.37f)
            ((float *)refs[t].data)[i] = next;
    p->w0[0] = -0.0f;
    p->b1[1] = 3.0e38f;
}

static const char *const META_KEYS[] = {"format", "note"};
static const char *const META_VALUES[] = {"pt", "say \"hi\" \\ bye"};

/* Writes the distinct-valued MLP fixture with metadata and returns its path (malloc'd). */
static char *write_mlp_checkpoint(const char *name, mlp_params *saved)
{
    dp_tensor_ref refs[4];
    fill_distinct(saved);
    mlp_refs(saved, refs);
    char *path = dp_test_path(name);
    ck_assert_int_eq(dp_safetensors_write(path, refs, 4, META_KEYS, META_VALUES, 2), DP_OK);
    return path;
}

static unsigned char *read_whole_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    ck_assert_int_ge(size, 0);
    rewind(f);
    unsigned char *bytes = malloc((size_t)size + 1);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_uint_eq(fread(bytes, 1, (size_t)size, f), (size_t)size);
    bytes[size] = '\0';
    fclose(f);
    *len = (size_t)size;
    return bytes;
}

static uint64_t prefix_value(const unsigned char *bytes)
{
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)bytes[i] << (8 * i);
    return n;
}

/* prefix, then header_len header bytes, then data_len data bytes, as one file. */
static char *write_parts(const char *name, const unsigned char prefix[8], const char *header,
                         size_t header_len, const void *data, size_t data_len)
{
    size_t len = 8 + header_len + data_len;
    unsigned char *bytes = malloc(len);
    ck_assert_ptr_nonnull(bytes);
    memcpy(bytes, prefix, 8);
    memcpy(bytes + 8, header, header_len);
    memcpy(bytes + 8 + header_len, data, data_len);
    char *path = dp_test_write_file(name, bytes, len, 0);
    free(bytes);
    return path;
}

/* A well-framed file: the prefix gives header's length. */
static char *write_with_header(const char *name, const char *header, const void *data,
                               size_t data_len)
{
    unsigned char prefix[8];
    size_t header_len = strlen(header);
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    return write_parts(name, prefix, header, header_len, data, data_len);
}

static void assert_failure(int rc, int code, const char *path, const char *phrase)
{
    ck_assert_int_eq(rc, code);
    ck_assert_msg(strstr(dp_last_error(), path) != NULL, "message does not name %s: %s", path,
                  dp_last_error());
    ck_assert_msg(strstr(dp_last_error(), phrase) != NULL, "message lacks \"%s\": %s", phrase,
                  dp_last_error());
}

static int read_w(const char *path)
{
    float w[4];
    dp_tensor_ref ref = {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w};
    return dp_safetensors_read(path, &ref, 1);
}

/* Reading a file made of header plus 16 data bytes fails with code and phrase. */
static void assert_header_rejected(const char *header, int code, const char *phrase)
{
    static const float zeros[4];
    char *path = write_with_header("case.safetensors", header, zeros, sizeof zeros);
    assert_failure(read_w(path), code, path, phrase);
    free(path);
}

static int count_temporaries(void)
{
    char *dir_path = dp_test_path("");
    int count = dp_test_count_entries(dir_path, ".tmp.");
    free(dir_path);
    return count;
}

START_TEST(test_round_trip_restores_identical_bytes)
{
    mlp_params saved, loaded;
    char *path = write_mlp_checkpoint("round_trip.safetensors", &saved);
    memset(&loaded, 0, sizeof loaded);
    dp_tensor_ref refs[4];
    mlp_refs(&loaded, refs);
    ck_assert_int_eq(dp_safetensors_read(path, refs, 4), DP_OK);
    ck_assert_mem_eq(&loaded, &saved, sizeof saved);
    ck_assert(signbit(loaded.w0[0]));
    free(path);
}
END_TEST

START_TEST(test_header_is_aligned_and_carries_metadata)
{
    mlp_params saved;
    char *path = write_mlp_checkpoint("aligned.safetensors", &saved);
    size_t len;
    unsigned char *bytes = read_whole_file(path, &len);
    uint64_t header_len = prefix_value(bytes);
    ck_assert_uint_eq((8 + header_len) % 8, 0);
    ck_assert_uint_eq(len, 8 + header_len + sizeof saved);
    char *header = (char *)bytes + 8;
    header[header_len] = '\0';
    ck_assert_ptr_nonnull(strstr(header, "\"__metadata__\":{\"format\":\"pt\","));
    ck_assert_ptr_nonnull(strstr(header, "\"note\":\"say \\\"hi\\\" \\\\ bye\""));
    ck_assert_ptr_nonnull(strstr(header, "\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[3,5]"));
    ck_assert_uint_eq(strspn(strrchr(header, '}') + 1, " "), strlen(strrchr(header, '}') + 1));
    free(bytes);
    free(path);
}
END_TEST

START_TEST(test_escaped_names_round_trip)
{
    float a[1] = {1.5f}, b[2] = {-1.0f, 2.0f}, got_a[1], got_b[2];
    const char *name_a = "quote\"back\\slash", *name_b = "tab\tnew\nline\x01 caf\xc3\xa9";
    dp_tensor_ref refs[2] = {
        {.ndim = 1, .shape = {1}, .data = a},
        {.ndim = 1, .shape = {2}, .data = b},
    };
    strcpy(refs[0].name, name_a);
    strcpy(refs[1].name, name_b);
    char *path = dp_test_path("escaped.safetensors");
    ck_assert_int_eq(dp_safetensors_write(path, refs, 2, NULL, NULL, 0), DP_OK);
    refs[0].data = got_a;
    refs[1].data = got_b;
    ck_assert_int_eq(dp_safetensors_read(path, refs, 2), DP_OK);
    ck_assert_mem_eq(got_a, a, sizeof a);
    ck_assert_mem_eq(got_b, b, sizeof b);
    free(path);
}
END_TEST

START_TEST(test_reads_reference_file)
{
    char *path = write_parts("reference.safetensors", REFERENCE_PREFIX, REFERENCE_HEADER,
                             sizeof REFERENCE_HEADER - 1, REFERENCE_DATA, sizeof REFERENCE_DATA);
    float weight[4], bias[2];
    dp_tensor_ref refs[2] = {
        {.name = "layers.0.weight", .ndim = 2, .shape = {2, 2}, .data = weight},
        {.name = "layers.0.bias", .ndim = 1, .shape = {2}, .data = bias},
    };
    ck_assert_int_eq(dp_safetensors_read(path, refs, 2), DP_OK);
    const float want_weight[4] = {1, 2, 3, 4}, want_bias[2] = {5, 6};
    ck_assert_mem_eq(weight, want_weight, sizeof weight);
    ck_assert_mem_eq(bias, want_bias, sizeof bias);
    free(path);
}
END_TEST

/* Our output must equal, byte for byte, what the reference implementation writes. */
static void assert_file_equals(const char *path, const unsigned char prefix[8], const char *header,
                               size_t header_len, const void *data, size_t data_len)
{
    size_t len;
    unsigned char *bytes = read_whole_file(path, &len);
    ck_assert_uint_eq(len, 8 + header_len + data_len);
    ck_assert_mem_eq(bytes, prefix, 8);
    ck_assert_mem_eq(bytes + 8, header, header_len);
    ck_assert_mem_eq(bytes + 8 + header_len, data, data_len);
    free(bytes);
}

START_TEST(test_writes_reference_bytes)
{
    float bias[2] = {5, 6}, weight[4] = {1, 2, 3, 4};
    dp_tensor_ref refs[2] = {
        {.name = "layers.0.bias", .ndim = 1, .shape = {2}, .data = bias},
        {.name = "layers.0.weight", .ndim = 2, .shape = {2, 2}, .data = weight},
    };
    char *path = dp_test_path("ours.safetensors");
    ck_assert_int_eq(dp_safetensors_write(path, refs, 2, NULL, NULL, 0), DP_OK);
    assert_file_equals(path, REFERENCE_PREFIX, REFERENCE_HEADER, sizeof REFERENCE_HEADER - 1,
                       REFERENCE_DATA, sizeof REFERENCE_DATA);
    free(path);
}
END_TEST

START_TEST(test_writes_reference_metadata_and_padding)
{
    float a[1] = {0};
    dp_tensor_ref ref = {.name = "a", .ndim = 1, .shape = {1}, .data = a};
    const char *const key[] = {"k\"\\"}, *const value[] = {"v\n\x01\x7f"};
    char *path = dp_test_path("padded.safetensors");
    ck_assert_int_eq(dp_safetensors_write(path, &ref, 1, key, value, 1), DP_OK);
    assert_file_equals(path, PADDED_PREFIX, PADDED_HEADER, sizeof PADDED_HEADER - 1, a, sizeof a);
    free(path);
}
END_TEST

START_TEST(test_reads_loose_layout_and_ignores_extras)
{
    const char *header =
        "{\r\n\t\"__metadata__\" : {\"format\": \"pt\", \"note\": \"a \\\"quoted\\\" value\"},\n"
        "  \"extra\": {\"data_offsets\": [16, 24], \"shape\": [4], \"dtype\": \"BF16\"},\n"
        "  \"layer\\u002e0\" : {\n"
        "     \"shape\" : [ 2 , 2 ],\n"
        "     \"data_offsets\" : [ 0 , 16 ] ,\n"
        "     \"dtype\" : \"F32\"\n"
        "  }\n}\n";
    float data[6] = {1, 2, 3, 4, 9, 9}, got[4];
    char *path = write_with_header("loose.safetensors", header, data, sizeof data);
    dp_tensor_ref ref = {.name = "layer.0", .ndim = 2, .shape = {2, 2}, .data = got};
    ck_assert_int_eq(dp_safetensors_read(path, &ref, 1), DP_OK);
    ck_assert_mem_eq(got, data, sizeof got);
    free(path);
}
END_TEST

START_TEST(test_decodes_unicode_escapes_in_keys)
{
    const char *header =
        "{\"caf\\u00e9\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"\\ud83d\\ude00\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    float data[2] = {7, 8}, got[2];
    char *path = write_with_header("unicode.safetensors", header, data, sizeof data);
    dp_tensor_ref refs[2] = {
        {.name = "caf\xc3\xa9", .ndim = 1, .shape = {1}, .data = &got[0]},
        {.name = "\xf0\x9f\x98\x80", .ndim = 1, .shape = {1}, .data = &got[1]},
    };
    ck_assert_int_eq(dp_safetensors_read(path, refs, 2), DP_OK);
    ck_assert_mem_eq(got, data, sizeof got);
    free(path);
}
END_TEST

START_TEST(test_rejects_short_files)
{
    char *empty = dp_test_write_file("empty.safetensors", "", 0, 0);
    assert_failure(read_w(empty), DP_EFORMAT, empty, "too short");
    char *four = dp_test_write_file("four.safetensors", "\x10\0\0\0", 4, 0);
    assert_failure(read_w(four), DP_EFORMAT, four, "too short");
    free(empty);
    free(four);
}
END_TEST

START_TEST(test_rejects_header_length_beyond_file)
{
    const unsigned char past_end[8] = {0xe8, 0x03}; /* 1000 bytes; 20 follow */
    char *path = write_parts("past_end.safetensors", past_end, "{}", 2, "0123456789abcdefgh", 18);
    assert_failure(read_w(path), DP_EFORMAT, path, "extends past the end");
    free(path);
    const unsigned char huge[8] = {0x00, 0xc2, 0xeb, 0x0b}; /* 200 000 000 bytes */
    path = write_parts("huge.safetensors", huge, "{}", 2, "", 0);
    assert_failure(read_w(path), DP_EFORMAT, path, "limit");
    free(path);
}
END_TEST

START_TEST(test_rejects_malformed_json)
{
    char deep[256] = "{\"x\":";
    memset(deep + 5, '[', 100);
    memset(deep + 105, ']', 100);
    strcpy(deep + 205, "}");
    const char *headers[] = {
        "",
        "{\"w\":{\"dtype\":\"F32}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2,],\"data_offsets\":[0,16]}}",
        "{\"w\" {\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
        "{\"w\\x\":1}",
        "{\"\\ud800\":1}",
        "{\"\\udc00\":1}",
        "{\"a\nb\":1}",
        "{\"n\":01}",
        "{\"n\":1.}",
        "{\"b\":tru}",
        "{}x",
        "{} {}",
        deep,
    };
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++)
        assert_header_rejected(headers[i], DP_EFORMAT, "malformed JSON");
}
END_TEST

START_TEST(test_rejects_top_level_array)
{
    assert_header_rejected("[{\"w\":{}}]", DP_EFORMAT, "not a JSON object");
}
END_TEST

START_TEST(test_rejects_missing_tensor)
{
    assert_header_rejected("{\"v\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                           DP_EFORMAT, "tensor 'w' not found");
}
END_TEST

START_TEST(test_rejects_wrong_dtype)
{
    assert_header_rejected("{\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}",
                           DP_EFORMAT, "tensor 'w' has dtype F16, expected F32");
    assert_header_rejected("{\"w\":{\"shape\":[2,2],\"data_offsets\":[0,16]}}", DP_EFORMAT,
                           "tensor 'w' has no string dtype");
}
END_TEST

START_TEST(test_rejects_wrong_shape)
{
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
                           DP_ESHAPE, "tensor 'w' has shape [2, 3], expected [2, 2]");
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                           DP_ESHAPE, "tensor 'w' has shape [4], expected [2, 2]");
    assert_header_rejected(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,2,2],\"data_offsets\":[0,16]}}", DP_EFORMAT,
        "tensor 'w' has 5 dimensions, expected shape [2, 2]");
    const char *invalid[] = {
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0,2],\"data_offsets\":[0,16]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,2],\"data_offsets\":[0,16]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999,2],\"data_offsets\":[0,16]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":\"2,2\",\"data_offsets\":[0,16]}}",
    };
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++)
        assert_header_rejected(invalid[i], DP_EFORMAT, "tensor 'w' has no valid shape");
}
END_TEST

START_TEST(test_rejects_offsets_out_of_range)
{
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,32]}}",
                           DP_EFORMAT, "extend past the 16-byte data section");
}
END_TEST

START_TEST(test_rejects_offsets_size_mismatch)
{
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",
                           DP_EFORMAT, "span 12 bytes, expected 16");
}
END_TEST

START_TEST(test_rejects_invalid_offsets)
{
    const char *headers[] = {
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16,16]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,0]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[-4,12]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2]}}",
    };
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++)
        assert_header_rejected(headers[i], DP_EFORMAT, "tensor 'w' has invalid data_offsets");
    assert_header_rejected("{\"w\":[]}", DP_EFORMAT, "tensor 'w' entry is not a JSON object");
}
END_TEST

START_TEST(test_rejects_truncated_data)
{
    mlp_params saved, loaded;
    char *path = write_mlp_checkpoint("truncated.safetensors", &saved);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size - 4), 0);
    dp_tensor_ref refs[4];
    mlp_refs(&loaded, refs);
    assert_failure(dp_safetensors_read(path, refs, 4), DP_EFORMAT, path, "extend past");
    free(path);
}
END_TEST

START_TEST(test_failed_read_leaves_buffers_untouched)
{
    float w[4] = {7, 7, 7, 7}, v[1];
    char *path = write_with_header("partial.safetensors", VALID_W_HEADER, w, sizeof w);
    const float untouched[4] = {7, 7, 7, 7};
    dp_tensor_ref refs[2] = {
        {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w},
        {.name = "v", .ndim = 1, .shape = {1}, .data = v},
    };
    assert_failure(dp_safetensors_read(path, refs, 2), DP_EFORMAT, path, "tensor 'v' not found");
    ck_assert_mem_eq(w, untouched, sizeof w);
    ck_assert_int_eq(read_w(path), DP_OK);
    free(path);
}
END_TEST

/* Parts of tensors: a block of rows, a slice across a row's edge, an empty part (its entry
 * still checked); each part's bytes alone land in its buffer. */
/* The MLP fixture written to name, refs over the saved values; returns its path (malloc'd). */
static char *mlp_file(const char *name, mlp_params *saved, dp_tensor_ref refs[4])
{
    char *path = write_mlp_checkpoint(name, saved);
    mlp_refs(saved, refs);
    return path;
}

START_TEST(test_reads_parts_of_tensors)
{
    mlp_params saved;
    dp_tensor_ref refs[4];
    char *path = mlp_file("parts.safetensors", &saved, refs);
    float rows[10], slice[4], guard[2] = {9, 9};
    dp_tensor_part parts[3] = {{refs[0], 5, 10}, {refs[2], 1, 4}, {refs[3], 0, 0}};
    parts[0].ref.data = rows;
    parts[1].ref.data = slice;
    parts[2].ref.data = guard;
    dp_meta meta = {.key = "format"};
    ck_assert_int_eq(dp_safetensors_read_parts(path, parts, 3, &meta, 1), DP_OK);
    ck_assert_mem_eq(rows, saved.w0 + 5, sizeof rows);
    ck_assert_mem_eq(slice, saved.w1 + 1, sizeof slice);
    ck_assert(guard[0] == 9 && guard[1] == 9);
    ck_assert_str_eq(meta.value, "pt");
    free(path);
}
END_TEST

/* A part's tensor is checked whole: its shape, however small the part; a part beyond its
 * tensor is refused; a truncated file is named before anything is read. */
START_TEST(test_parts_check_the_whole_tensor_and_the_file)
{
    mlp_params saved;
    dp_tensor_ref refs[4];
    char *path = mlp_file("parts_checked.safetensors", &saved, refs);
    float one[1] = {7}, beyond[4];
    dp_tensor_part part = {refs[0], 0, 1};
    part.ref.data = one;
    part.ref.shape[0] = 5;
    assert_failure(dp_safetensors_read_parts(path, &part, 1, NULL, 0), DP_ESHAPE, path,
                   "tensor 'layers.0.weight' has shape [3, 5], expected [5, 5]");
    ck_assert(one[0] == 7);
    dp_tensor_part past = {refs[3], 0, 4};
    past.ref.data = beyond;
    assert_failure(dp_safetensors_read_parts(path, &past, 1, NULL, 0), DP_EINVAL, path, "elements [0, 4)");
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size - 4), 0);
    part = (dp_tensor_part){refs[0], 0, 1};
    part.ref.data = one;
    assert_failure(dp_safetensors_read_parts(path, &part, 1, NULL, 0), DP_EFORMAT, path, "extend past");
    free(path);
}
END_TEST

/* A streamed write asks its tensors piece by piece, in order, and writes the bytes a whole
 * write would; a fill that fails ends it with its message and leaves no file. */
typedef struct fill_log {
    const mlp_params *from;
    int calls, fail_at;
    size_t largest;
} fill_log;

static int fill_from(void *arg, int tensor, size_t first, size_t count, void *buf)
{
    fill_log *log = arg;
    if (++log->calls == log->fail_at)
        return dp_fail(DP_EMPI, "the gather of piece %d failed", log->calls);
    mlp_params copy = *log->from;
    dp_tensor_ref refs[4];
    mlp_refs(&copy, refs);
    memcpy(buf, (float *)refs[tensor].data + first, count * sizeof(float));
    log->largest = count > log->largest ? count : log->largest;
    return 0;
}

START_TEST(test_streamed_write_equals_whole_write)
{
    mlp_params saved;
    dp_tensor_ref refs[4];
    char *whole = mlp_file("whole.safetensors", &saved, refs), *streamed = dp_test_path("streamed.safetensors");
    refs[0].data = refs[2].data = NULL; /* the weights asked of fill, the biases given */
    fill_log log = {&saved, 0, 0, 0};
    ck_assert_int_eq(dp_safetensors_write_streamed(streamed, refs, 4, META_KEYS, META_VALUES, 2, fill_from, &log, 4),
                     DP_OK);
    ck_assert_int_eq(log.calls, 4 + 2); /* 15 elements in 4s, 6 in 4s */
    ck_assert_uint_eq(log.largest, 4);
    size_t a, b;
    unsigned char *expected = read_whole_file(whole, &a), *got = read_whole_file(streamed, &b);
    ck_assert_uint_eq(a, b);
    ck_assert_mem_eq(got, expected, a);
    free(expected);
    free(got);
    ck_assert_int_eq(unlink(streamed), 0);
    log = (fill_log){&saved, 0, 3, 0};
    assert_failure(dp_safetensors_write_streamed(streamed, refs, 4, META_KEYS, META_VALUES, 2, fill_from, &log, 4),
                   DP_EMPI, streamed, "the gather of piece 3 failed");
    ck_assert_int_ne(access(streamed, F_OK), 0);
    ck_assert_int_eq(count_temporaries(), 0);
    free(whole);
    free(streamed);
}
END_TEST

START_TEST(test_rejects_nonexistent_file)
{
    char *path = dp_test_path("no_such_file.safetensors");
    assert_failure(read_w(path), DP_EIO, path, "cannot open");
    free(path);
}
END_TEST

START_TEST(test_write_into_missing_directory_fails_cleanly)
{
    float w[4] = {0};
    dp_tensor_ref ref = {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w};
    char *path = dp_test_path("no_such_dir/model.safetensors");
    assert_failure(dp_safetensors_write(path, &ref, 1, NULL, NULL, 0), DP_EIO, path,
                   "cannot create temporary file");
    ck_assert_int_ne(access(path, F_OK), 0);
    free(path);
}
END_TEST

START_TEST(test_write_leaves_no_temporary)
{
    mlp_params saved;
    char *path = write_mlp_checkpoint("atomic.safetensors", &saved);
    ck_assert_int_eq(count_temporaries(), 0);
    /* Overwriting an existing checkpoint goes through the same rename. */
    free(write_mlp_checkpoint("atomic.safetensors", &saved));
    ck_assert_int_eq(count_temporaries(), 0);
    free(path);
}
END_TEST

START_TEST(test_directory_at_the_target_is_refused)
{
    float w[4] = {0};
    dp_tensor_ref ref = {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w};
    char *path = dp_test_path("occupied_by_directory");
    ck_assert_int_eq(mkdir(path, 0700), 0);
    assert_failure(dp_safetensors_write(path, &ref, 1, NULL, NULL, 0), DP_EIO, path,
                   "is a directory, not a regular file: refusing to replace it");
    ck_assert_int_eq(count_temporaries(), 0);
    ck_assert_int_eq(rmdir(path), 0);
    free(path);
}
END_TEST

START_TEST(test_write_rejects_invalid_names)
{
    float w[4] = {0};
    dp_tensor_ref refs[2] = {
        {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w},
        {.name = "w", .ndim = 1, .shape = {4}, .data = w},
    };
    char *path = dp_test_path("invalid_names.safetensors");
    assert_failure(dp_safetensors_write(path, refs, 2, NULL, NULL, 0), DP_EINVAL, path,
                   "duplicate tensor name 'w'");
    strcpy(refs[1].name, "__metadata__");
    assert_failure(dp_safetensors_write(path, refs, 2, NULL, NULL, 0), DP_EINVAL, path,
                   "reserved");
    ck_assert_int_ne(access(path, F_OK), 0);
    ck_assert_int_eq(count_temporaries(), 0);
    free(path);
}
END_TEST

START_TEST(test_metadata_values_are_read_back)
{
    mlp_params saved, loaded;
    char *path = write_mlp_checkpoint("meta.safetensors", &saved);
    dp_tensor_ref refs[4];
    mlp_refs(&loaded, refs);
    dp_meta meta[3] = {{.key = "note"}, {.key = "format"}, {.key = "absent", .value = "stale"}};
    ck_assert_int_eq(dp_safetensors_read_with_metadata(path, refs, 4, meta, 3), DP_OK);
    ck_assert_str_eq(meta[0].value, META_VALUES[1]);
    ck_assert_str_eq(meta[1].value, "pt");
    ck_assert_str_eq(meta[2].value, "");
    ck_assert_mem_eq(&loaded, &saved, sizeof saved);
    free(path);
}
END_TEST

START_TEST(test_non_string_metadata_is_rejected)
{
    static const char header[] = "{\"__metadata__\":{\"step\":12},"
                                 "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    float data[4] = {1, 2, 3, 4}, w[4];
    char *path = write_with_header("meta-number.safetensors", header, data, sizeof data);
    dp_tensor_ref ref = {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w};
    dp_meta meta = {.key = "step"};
    assert_failure(dp_safetensors_read_with_metadata(path, &ref, 1, &meta, 1), DP_EFORMAT, path,
                   "metadata 'step' is not a string");
    free(path);
}
END_TEST

START_TEST(test_int64_tensors_round_trip_and_are_typed)
{
    /* BatchNorm's num_batches_tracked is int64 in PyTorch: written as I64, read back exactly,
     * and never taken for a float tensor of the same shape. */
    int64_t tracked = INT64_C(123456789012), back = 0;
    float w[2] = {1.5f, -2.0f}, w_back[2];
    dp_tensor_ref refs[2] = {
        {.name = "layers.1.num_batches_tracked", .ndim = 0, .dtype = DP_DTYPE_I64, .data = &tracked},
        {.name = "w", .ndim = 1, .shape = {2}, .data = w}};
    char *path = dp_test_path("int64.safetensors");
    ck_assert_int_eq(dp_safetensors_write(path, refs, 2, NULL, NULL, 0), DP_OK);
    size_t len = 0;
    unsigned char *file = read_whole_file(path, &len);
    ck_assert_ptr_nonnull(strstr((const char *)file + 8, "\"dtype\":\"I64\",\"shape\":[]"));
    free(file);
    dp_tensor_ref in[2] = {refs[0], refs[1]};
    in[0].data = &back;
    in[1].data = w_back;
    ck_assert_int_eq(dp_safetensors_read(path, in, 2), DP_OK);
    ck_assert(back == tracked);
    ck_assert_mem_eq(w_back, w, sizeof w);
    dp_tensor_ref as_float = {.name = "layers.1.num_batches_tracked", .ndim = 0, .data = w_back};
    assert_failure(dp_safetensors_read(path, &as_float, 1), DP_EFORMAT, path,
                   "has dtype I64, expected F32");
    free(path);
}
END_TEST

/* --- what the format forbids (the reference implementation's checks) --- */

/* Two tensors "a" [2] and "b" [2] with the given offsets over data_len data bytes. */
static char *write_pair(const char *name, int64_t a0, int64_t a1, int64_t b0, int64_t b1,
                        size_t data_len)
{
    char header[256];
    snprintf(header, sizeof header,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[%lld,%lld]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[%lld,%lld]}}",
             (long long)a0, (long long)a1, (long long)b0, (long long)b1);
    static const unsigned char data[64];
    ck_assert_uint_le(data_len, sizeof data);
    return write_with_header(name, header, data, data_len);
}

static int read_a(const char *path)
{
    float a[2];
    dp_tensor_ref ref = {.name = "a", .ndim = 1, .shape = {2}, .data = a};
    return dp_safetensors_read(path, &ref, 1);
}

START_TEST(test_tensors_in_any_header_order_tile_the_data)
{
    char *path = write_pair("swapped.safetensors", 8, 16, 0, 8, 16);
    ck_assert_msg(read_a(path) == DP_OK, "%s", dp_last_error());
    free(path);
}
END_TEST

START_TEST(test_rejects_overlapping_offsets)
{
    char *path = write_pair("overlap.safetensors", 0, 8, 4, 12, 12);
    assert_failure(read_a(path), DP_EFORMAT, path, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    free(path);
    path = write_pair("same.safetensors", 0, 8, 0, 8, 8);
    assert_failure(read_a(path), DP_EFORMAT, path, "overlap");
    free(path);
}
END_TEST

START_TEST(test_rejects_holes_and_trailing_bytes)
{
    char *path = write_pair("hole.safetensors", 0, 8, 12, 20, 20);
    assert_failure(read_a(path), DP_EFORMAT, path, "bytes [8, 12) of the data section belong to no tensor");
    free(path);
    path = write_pair("leading.safetensors", 4, 12, 12, 20, 20);
    assert_failure(read_a(path), DP_EFORMAT, path, "bytes [0, 4) of the data section");
    free(path);
    path = write_pair("trailing.safetensors", 0, 8, 8, 16, 17);
    assert_failure(read_a(path), DP_EFORMAT, path, "1 bytes follow the last tensor's data");
    free(path);
}
END_TEST

START_TEST(test_rejects_duplicate_names_however_spelled)
{
    const char *headers[] = {
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"\\u0077\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}",
    };
    for (int i = 0; i < 2; i++)
        assert_header_rejected(headers[i], DP_EFORMAT, "duplicate tensor name 'w'");
    assert_header_rejected("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},"
                           "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                           DP_EFORMAT, "duplicate metadata key 'k'");
    assert_header_rejected("{\"__metadata__\":{},\"__metadata__\":{},"
                           "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                           DP_EFORMAT, "duplicate key '__metadata__'");
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2,2],"
                           "\"data_offsets\":[0,16]}}", DP_EFORMAT, "tensor 'w' has 'dtype' twice");
}
END_TEST

START_TEST(test_rejects_non_string_metadata_even_when_not_asked_for)
{
    const char *values[] = {"12", "null", "[\"a\"]", "{}", "true"};
    for (int i = 0; i < 5; i++) {
        char header[160];
        snprintf(header, sizeof header, "{\"__metadata__\":{\"unasked\":%s},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", values[i]);
        assert_header_rejected(header, DP_EFORMAT, "metadata 'unasked' is not a string");
    }
    assert_header_rejected("{\"__metadata__\":[],"
                           "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                           DP_EFORMAT, "__metadata__ is not a JSON object of strings");
    /* The reference accepts "__metadata__": null as no metadata. */
    static const float zeros[4];
    char *path = write_with_header("null-meta.safetensors", "{\"__metadata__\":null,"
                                   "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                                   zeros, sizeof zeros);
    ck_assert_msg(read_w(path) == DP_OK, "%s", dp_last_error());
    free(path);
}
END_TEST

START_TEST(test_rejects_headers_that_are_not_utf8)
{
    const char *headers[] = {
        "{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
        "{\"\xc0\xaf\":1}",         /* overlong "/" */
        "{\"\xed\xa0\x80\":1}",     /* an encoded UTF-16 surrogate */
        "{\"\xf4\x90\x80\x80\":1}", /* above U+10FFFF */
        "{\"\xe2\x82\":1}",         /* cut short */
    };
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++)
        assert_header_rejected(headers[i], DP_EFORMAT, "not valid UTF-8");
}
END_TEST

START_TEST(test_rejects_unknown_dtypes_and_nul_in_names)
{
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                           "\"x\":{\"dtype\":\"F4\",\"shape\":[0],\"data_offsets\":[16,16]}}",
                           DP_EFORMAT, "tensor 'x' has dtype 'F4'");
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                           "\"w\\u0000x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}",
                           DP_EFORMAT, "NUL character");
    assert_header_rejected("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                           "\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
                           "\"data_offsets\":[16,16]}}", DP_EFORMAT, "byte size overflows");
}
END_TEST

/* --- the file's own checksum --- */

START_TEST(test_crc_covers_every_byte)
{
    float w[2] = {1.0f, -2.0f};
    dp_tensor_ref ref = {.name = "w", .ndim = 1, .shape = {2}, .data = w};
    const char *const keys[] = {"step"}, *const values[] = {"20"};
    char *path = dp_test_path("crc.safetensors");
    ck_assert_int_eq(dp_safetensors_write_with_crc(path, &ref, 1, keys, values, 1, "checksum"), DP_OK);
    ck_assert_msg(dp_safetensors_verify_crc(path, "checksum") == DP_OK, "%s", dp_last_error());
    size_t len;
    unsigned char *bytes = read_whole_file(path, &len);
    ck_assert_ptr_nonnull(strstr((char *)bytes + 8, "\"checksum\":\"" DP_SAFETENSORS_CRC_PREFIX));
    /* One flipped bit anywhere (prefix, metadata, checksum digits, padding, data) is caught. */
    for (size_t i = 0; i < len; i++) {
        unsigned char *flipped = malloc(len);
        memcpy(flipped, bytes, len);
        flipped[i] ^= 0x04;
        char *bad = dp_test_write_file("crc-flipped.safetensors", flipped, len, 0);
        ck_assert_msg(dp_safetensors_verify_crc(bad, "checksum") != DP_OK,
                      "a flipped bit at byte %zu of %zu went unnoticed", i, len);
        free(bad);
        free(flipped);
    }
    free(bytes);
    char *plain = write_mlp_checkpoint("no-crc.safetensors", &(mlp_params){0});
    assert_failure(dp_safetensors_verify_crc(plain, "checksum"), DP_EFORMAT, plain,
                   "no 'checksum' metadata");
    free(plain);
    free(path);
}
END_TEST

/* --- what is read and what is replaced: regular files only --- */

START_TEST(test_refuses_to_read_a_fifo)
{
    char *path = dp_test_path("pipe.safetensors");
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    /* With no writer, opening it for reading would block forever: it must fail at once. */
    assert_failure(read_w(path), DP_EIO, path, "is a FIFO (named pipe), not a regular file");
    free(path);
}
END_TEST

START_TEST(test_refuses_to_replace_fifos_and_symlinks)
{
    float w[4] = {0};
    dp_tensor_ref ref = {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w};
    char *fifo = dp_test_path("target-fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    assert_failure(dp_safetensors_write(fifo, &ref, 1, NULL, NULL, 0), DP_EIO, fifo,
                   "is a FIFO (named pipe), not a regular file: refusing to replace it");
    struct stat st;
    ck_assert_int_eq(lstat(fifo, &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));
    mlp_params saved;
    char *real = write_mlp_checkpoint("link-target.safetensors", &saved);
    char *link = dp_test_path("target-link");
    ck_assert_int_eq(symlink(real, link), 0);
    assert_failure(dp_safetensors_write(link, &ref, 1, NULL, NULL, 0), DP_EIO, link,
                   "is a symbolic link, not a regular file");
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    ck_assert_int_eq(count_temporaries(), 0);
    free(fifo);
    free(real);
    free(link);
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *format = tcase_create("format");
    tcase_add_test(format, test_round_trip_restores_identical_bytes);
    tcase_add_test(format, test_header_is_aligned_and_carries_metadata);
    tcase_add_test(format, test_escaped_names_round_trip);
    tcase_add_test(format, test_reads_reference_file);
    tcase_add_test(format, test_writes_reference_bytes);
    tcase_add_test(format, test_writes_reference_metadata_and_padding);
    tcase_add_test(format, test_reads_loose_layout_and_ignores_extras);
    tcase_add_test(format, test_decodes_unicode_escapes_in_keys);
    tcase_add_test(format, test_metadata_values_are_read_back);
    tcase_add_test(format, test_non_string_metadata_is_rejected);
    tcase_add_test(format, test_int64_tensors_round_trip_and_are_typed);
    suite_add_tcase(s, format);

    TCase *broken = tcase_create("broken files");
    tcase_add_test(broken, test_rejects_short_files);
    tcase_add_test(broken, test_rejects_header_length_beyond_file);
    tcase_add_test(broken, test_rejects_malformed_json);
    tcase_add_test(broken, test_rejects_top_level_array);
    tcase_add_test(broken, test_rejects_missing_tensor);
    tcase_add_test(broken, test_rejects_wrong_dtype);
    tcase_add_test(broken, test_rejects_wrong_shape);
    tcase_add_test(broken, test_rejects_offsets_out_of_range);
    tcase_add_test(broken, test_rejects_offsets_size_mismatch);
    tcase_add_test(broken, test_rejects_invalid_offsets);
    tcase_add_test(broken, test_rejects_truncated_data);
    tcase_add_test(broken, test_failed_read_leaves_buffers_untouched);
    tcase_add_test(broken, test_rejects_nonexistent_file);
    tcase_add_test(broken, test_parts_check_the_whole_tensor_and_the_file);
    suite_add_tcase(s, broken);

    TCase *parts = tcase_create("parts and streamed writes");
    tcase_add_test(parts, test_reads_parts_of_tensors);
    tcase_add_test(parts, test_streamed_write_equals_whole_write);
    suite_add_tcase(s, parts);

    TCase *strict = tcase_create("what the format forbids");
    tcase_add_test(strict, test_tensors_in_any_header_order_tile_the_data);
    tcase_add_test(strict, test_rejects_overlapping_offsets);
    tcase_add_test(strict, test_rejects_holes_and_trailing_bytes);
    tcase_add_test(strict, test_rejects_duplicate_names_however_spelled);
    tcase_add_test(strict, test_rejects_non_string_metadata_even_when_not_asked_for);
    tcase_add_test(strict, test_rejects_headers_that_are_not_utf8);
    tcase_add_test(strict, test_rejects_unknown_dtypes_and_nul_in_names);
    tcase_add_test(strict, test_crc_covers_every_byte);
    suite_add_tcase(s, strict);

    TCase *writing = tcase_create("atomic writes");
    tcase_add_test(writing, test_refuses_to_read_a_fifo);
    tcase_add_test(writing, test_refuses_to_replace_fifos_and_symlinks);
    tcase_add_test(writing, test_write_into_missing_directory_fails_cleanly);
    tcase_add_test(writing, test_write_leaves_no_temporary);
    tcase_add_test(writing, test_directory_at_the_target_is_refused);
    tcase_add_test(writing, test_write_rejects_invalid_names);
    suite_add_tcase(s, writing);
    return s;
}

int main(void)
{
    return dp_test_run_suite(safetensors_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
