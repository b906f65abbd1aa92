/* What the fuzz targets share: the readers take paths, so each input is written to an
 * in-memory file, and accepted data is read end to end so a sanitizer sees any overrun. */
#ifndef DP_FUZZ_INPUT_H
#define DP_FUZZ_INPUT_H

#include "dp/data.h"

#include <stddef.h>
#include <stdint.h>

/* The libFuzzer entry point each target defines (replay.c calls it for make check). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SLOTS 3

/* Replaces the contents of in-memory file slot (0 to FUZZ_SLOTS - 1) with bytes and returns
 * a path the readers can open ("/proc/self/fd/N"); aborts if the file cannot be written. */
const char *fuzz_file_put(int slot, const void *bytes, size_t len);

/* Reads every byte of buf, so an allocation shorter than the reader claims is reported. */
void fuzz_touch(const void *buf, size_t len);

/* Reads every row of an accepted dataset through its reader, last row first (an index list,
 * not a range), and touches what came back, so a reader's overrun of its file is reported. */
void fuzz_read_rows(const dp_dataset *ds);

/* Aborts with message when ok is false: a broken reader promise is a crash to fuzzing. */
void fuzz_require(int ok, const char *message);

#endif
