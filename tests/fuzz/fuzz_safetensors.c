/* Fuzz target: the safetensors reader on arbitrary bytes, expecting the tensors and metadata
 * keys the seed corpus holds (a matrix, a vector, a scalar, an empty tensor; "step" and
 * "config"), and holding it to its promises: a malformed file leaves the caller's buffers
 * untouched, and metadata values come back as terminated strings. */
#include "dp/error.h"
#include "dp/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

#include <string.h>

#define SENTINEL 0xA5

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    expected_buffers buffers;
    memset(&buffers, SENTINEL, sizeof buffers);
    dp_tensor_ref refs[4];
    expected_refs(&buffers, refs);
    dp_meta meta[2] = {{.key = "step"}, {.key = "config"}};
    int rc = dp_safetensors_read_with_metadata(fuzz_file_put(0, data, size), refs, 4, meta, 2);
    fuzz_require(rc == 0 || rc == DP_EFORMAT, "unexpected error code for an in-memory file");
    fuzz_require(rc == 0 || untouched(&buffers), "a malformed file changed the buffers");
    fuzz_touch(&buffers, sizeof buffers);
    for (int i = 0; rc == 0 && i < 2; i++)
        fuzz_require(memchr(meta[i].value, '\0', sizeof meta[i].value) != NULL,
                     "a metadata value is not terminated");
    return 0;
}
