/* The safetensors header as the format defines it, checked as its reference implementation
 * (huggingface/safetensors) checks it before any tensor is used: UTF-8 JSON, an object whose
 * "__metadata__" maps strings to strings and whose every other member describes a tensor
 * (known dtype, shape, data_offsets [begin, end] spanning exactly the shape's bytes), and no
 * name twice. The data layout (st_header_check_layout) is checked separately, so a file that
 * is only the wrong model says so first. */
#ifndef DP_IO_SAFETENSORS_HEADER_H
#define DP_IO_SAFETENSORS_HEADER_H

#include "dp/tensor.h"
#include "src/io/json.h"

#include <stddef.h>
#include <stdint.h>

typedef struct st_tensor {
    const char *name;               /* decoded, terminated (in the header's name arena) */
    char dtype[16];                 /* as written, terminated */
    int ndim;                       /* every dimension counts; dims holds the first few */
    int64_t dims[DP_TENSOR_MAX_DIMS];
    int64_t begin, end;             /* byte range in the data section */
} st_tensor;

typedef struct st_meta_entry {
    const char *key;                /* decoded, terminated */
    dp_json value;                  /* the raw JSON string */
} st_meta_entry;

typedef struct st_header {
    st_tensor *tensors;             /* sorted by name */
    int tensor_count;
    st_meta_entry *meta;            /* sorted by key */
    int meta_count;
    char *names;                    /* arena of decoded names and keys */
    int64_t data_size;              /* bytes after the header */
} st_header;

/* Parses and checks the len header bytes (of a file whose data section has data_size bytes).
 * Returns 0, DP_EFORMAT naming path and the problem, or DP_ENOMEM; h is freed on failure.
 * Memory: about the header's size again plus one entry per member. */
int st_header_parse(const char *path, const char *json, size_t len, int64_t data_size,
                    st_header *h);

/* The data section is exactly the tensors' bytes: each range inside it, none overlapping, no
 * byte between or after them (holes and trailing bytes make polyglot files). */
int st_header_check_layout(const char *path, const st_header *h);

const st_tensor *st_header_tensor(const st_header *h, const char *name);

/* The raw string value of metadata key, or a cursor with pos NULL when absent. */
dp_json st_header_metadata(const st_header *h, const char *key);

/* Element size of a dtype name ("F32": 4), or 0 when it is not a byte-sized safetensors dtype. */
size_t st_dtype_size(const char *dtype);

void st_header_free(st_header *h);

#endif
