/* The fake CUDA runtime (fakecuda.h): the libcudart calls dptrain makes, on the host, but for
 * streams and events (queue.c). Device memory is its own mapping, PROT_NONE except while
 * queued work runs; copies are queued work, and cudaMemcpy and cudaFree are synchronisation
 * points as in the real runtime. Device memory freed while a CUDA graph is instantiated keeps
 * its addresses unused until no graph is left, so a replay that still uses it faults. */
#define _GNU_SOURCE
#include "tests/fakecuda/fakecuda.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { MAX_DEVICES = 16, UUID_BYTES = 16 };
enum block_kind { DEVICE_MEMORY, PINNED_MEMORY };

/* One allocation. Device blocks end flush against a guard page (at 256-byte alignment, as
 * cudaMalloc's), so an overrun by a queued task faults too. */
typedef struct block {
    char *base;
    size_t bytes;
    void *map;
    size_t map_bytes;
    enum block_kind kind;
    struct block *next;
} block;

static struct {
    block *blocks;
    block *quarantine; /* device blocks freed while a graph was instantiated: addresses kept unused */
    long graph_execs;
    size_t device_bytes;
    int current;
    cudaError_t last;
    long handles;
    pid_t owner;
} fake;

void fakecuda_complain(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    fprintf(stderr, "fakecuda: ");
    vfprintf(stderr, format, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* A call's result: the sticky error wins; a failure is also the next cudaGetLastError. */
static cudaError_t result(cudaError_t e)
{
    if (fakecuda_sticky() != cudaSuccess)
        return fakecuda_sticky();
    if (e != cudaSuccess)
        fake.last = e;
    return e;
}

/* ---- devices ---- */

/* The FAKECUDA_DEVICES names, read anew each call (a test may play several machines). */
static int device_names(char names[MAX_DEVICES][UUID_BYTES + 1])
{
    const char *list = getenv("FAKECUDA_DEVICES");
    int count = 0;
    memset(names, 0, MAX_DEVICES * sizeof *names); /* the bytes past a name are its UUID's too */
    while (list && *list && count < MAX_DEVICES) {
        size_t len = strcspn(list, ",");
        if (len) {
            snprintf(names[count], UUID_BYTES + 1, "%.*s", (int)(len < UUID_BYTES ? len : UUID_BYTES), list);
            count++;
        }
        list += len + (list[len] == ',');
    }
    return count;
}

int fakecuda_device_count(void)
{
    char names[MAX_DEVICES][UUID_BYTES + 1];
    return device_names(names);
}

int fakecuda_current_device(void)
{
    return fake.current;
}

static size_t device_memory(void)
{
    const char *text = getenv("FAKECUDA_MEMORY");
    return text ? (size_t)strtoull(text, NULL, 10) : (size_t)80 << 30;
}

/* FAKECUDA_CC: the compute capability the fake GPUs report, e.g. 75 (default 90, an H100). */
static int compute_capability(void)
{
    const char *text = getenv("FAKECUDA_CC");
    return text ? atoi(text) : 90;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = fakecuda_device_count();
    return result(*count ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= fakecuda_device_count())
        return result(cudaErrorInvalidDevice);
    fake.current = device;
    return result(cudaSuccess);
}

cudaError_t cudaGetDevice(int *device)
{
    *device = fake.current;
    return result(cudaSuccess);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    char names[MAX_DEVICES][UUID_BYTES + 1];
    int count = device_names(names);
    if (device < 0 || device >= count)
        return result(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "fakecuda GPU %s", names[device]);
    memcpy(prop->uuid.bytes, names[device], UUID_BYTES);
    prop->totalGlobalMem = device_memory();
    prop->major = compute_capability() / 10;
    prop->minor = compute_capability() % 10;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->multiProcessorCount = 4;
    /* A bus id from the name, so every process sees one GPU at one address. */
    unsigned hash = 2166136261u;
    for (const char *c = names[device]; *c; c++)
        hash = (hash ^ (unsigned char)*c) * 16777619u;
    prop->pciBusID = (int)(hash % 255) + 1;
    return result(cudaSuccess);
}

/* ---- errors ---- */

static const struct {
    cudaError_t code;
    const char *name, *text;
} errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "the capture was not initiated in this stream"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined",
     "capturing stream has unjoined work"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream"},
};

static size_t error_index(cudaError_t e)
{
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
        if (errors[i].code == e)
            return i;
    return (size_t)-1;
}

const char *cudaGetErrorName(cudaError_t error)
{
    size_t i = error_index(error);
    return i == (size_t)-1 ? "cudaErrorUnknown" : errors[i].name;
}

const char *cudaGetErrorString(cudaError_t error)
{
    size_t i = error_index(error);
    return i == (size_t)-1 ? "unknown error" : errors[i].text;
}

cudaError_t cudaGetLastError(void)
{
    if (fakecuda_sticky() != cudaSuccess)
        return fakecuda_sticky();
    cudaError_t e = fake.last;
    fake.last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return fakecuda_sticky() != cudaSuccess ? fakecuda_sticky() : fake.last;
}

/* ---- memory ---- */

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static block *find_in(block *list, const void *ptr, size_t bytes)
{
    const char *p = ptr;
    for (block *b = list; b; b = b->next)
        if (p >= b->base && p < b->base + (b->bytes ? b->bytes : 1) && bytes <= (size_t)(b->base + b->bytes - p))
            return b;
    return NULL;
}

static block *find_block(const void *ptr, size_t bytes)
{
    return find_in(fake.blocks, ptr, bytes);
}

static const char *kind_of(const void *ptr)
{
    block *b = find_block(ptr, 0);
    if (!b && find_in(fake.quarantine, ptr, 0))
        return "device memory freed while a CUDA graph was instantiated";
    return !b ? "pageable host memory" : b->kind == DEVICE_MEMORY ? "device memory" : "page-locked host memory";
}

int fakecuda_is_device(const void *ptr, size_t bytes)
{
    block *b = find_block(ptr, bytes);
    return b && b->kind == DEVICE_MEMORY;
}

void fakecuda_protect(int readable)
{
    for (block *b = fake.blocks; b; b = b->next)
        if (b->kind == DEVICE_MEMORY && mprotect(b->map, b->map_bytes - page_size(), readable ? PROT_READ | PROT_WRITE : PROT_NONE)) {
            perror("fakecuda: mprotect");
            abort();
        }
}

static void check_leaks(void)
{
    if (getpid() != fake.owner)
        return;
    size_t device = 0, pinned = 0, bytes = 0;
    for (block *b = fake.blocks; b; b = b->next) {
        *(b->kind == DEVICE_MEMORY ? &device : &pinned) += 1;
        bytes += b->bytes;
    }
    if (device + pinned + (size_t)fake.handles == 0)
        return;
    fakecuda_complain("at exit: %zu device and %zu page-locked allocations (%zu bytes) and %ld handles (cuBLAS, streams, events) never freed",
                      device, pinned, bytes, fake.handles);
    _exit(3);
}

static void *allocate(size_t bytes, enum block_kind kind)
{
    if (!fake.owner) {
        fake.owner = getpid();
        const char *leaks = getenv("FAKECUDA_CHECK_LEAKS");
        if (leaks && strcmp(leaks, "1") == 0)
            atexit(check_leaks);
    }
    size_t page = page_size(), aligned = (bytes + 255) / 256 * 256;
    size_t data_pages = (aligned + page - 1) / page;
    block *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->map_bytes = (data_pages + 1) * page;
    b->map = mmap(NULL, b->map_bytes, kind == DEVICE_MEMORY ? PROT_NONE : PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->map == MAP_FAILED) {
        free(b);
        return NULL;
    }
    mprotect((char *)b->map + data_pages * page, page, PROT_NONE);
    b->base = (char *)b->map + data_pages * page - aligned;
    b->bytes = bytes;
    b->kind = kind;
    fakecuda_lock();
    b->next = fake.blocks;
    fake.blocks = b;
    fakecuda_unlock();
    return b->base;
}

static cudaError_t release(void *ptr, enum block_kind kind, const char *call)
{
    if (!ptr)
        return result(cudaSuccess);
    cudaError_t e = fakecuda_capture_forbids(NULL, call);
    if (e != cudaSuccess)
        return result(e);
    e = fakecuda_synchronize();
    if (e != cudaSuccess)
        return e;
    fakecuda_lock();
    for (block **link = &fake.blocks; *link; link = &(*link)->next) {
        block *b = *link;
        if (b->base == ptr && b->kind == kind) {
            *link = b->next;
            if (kind == DEVICE_MEMORY)
                fake.device_bytes -= b->bytes;
            if (kind == DEVICE_MEMORY && fake.graph_execs > 0 &&
                mmap(b->map, b->map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
                b->next = fake.quarantine; /* its pages dropped, its addresses held */
                fake.quarantine = b;
            } else {
                munmap(b->map, b->map_bytes);
                free(b);
            }
            fakecuda_unlock();
            return result(cudaSuccess);
        }
    }
    fakecuda_unlock();
    fakecuda_complain("%s(%p): not the start of a live %s allocation (it is %s)", call, ptr,
                      kind == DEVICE_MEMORY ? "cudaMalloc" : "cudaMallocHost", kind_of(ptr));
    return result(cudaErrorInvalidValue);
}

cudaError_t cudaMalloc(void **ptr, size_t bytes)
{
    *ptr = NULL;
    if (fakecuda_sticky() != cudaSuccess)
        return fakecuda_sticky();
    if (fakecuda_device_count() == 0)
        return result(cudaErrorNoDevice);
    cudaError_t forbidden = fakecuda_capture_forbids(NULL, "cudaMalloc");
    if (forbidden != cudaSuccess)
        return result(forbidden);
    if (bytes == 0)
        return result(cudaSuccess);
    if (bytes > device_memory() - fake.device_bytes || !(*ptr = allocate(bytes, DEVICE_MEMORY)))
        return result(cudaErrorMemoryAllocation);
    fake.device_bytes += bytes;
    return result(cudaSuccess);
}

cudaError_t cudaFree(void *ptr)
{
    return release(ptr, DEVICE_MEMORY, "cudaFree");
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes)
{
    *ptr = NULL;
    if (fakecuda_sticky() != cudaSuccess)
        return fakecuda_sticky();
    if (fakecuda_device_count() == 0)
        return result(cudaErrorNoDevice);
    cudaError_t forbidden = fakecuda_capture_forbids(NULL, "cudaMallocHost");
    if (forbidden != cudaSuccess)
        return result(forbidden);
    return result((*ptr = allocate(bytes, PINNED_MEMORY)) ? cudaSuccess : cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void *ptr)
{
    return release(ptr, PINNED_MEMORY, "cudaFreeHost");
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    *total_bytes = device_memory();
    *free_bytes = *total_bytes - fake.device_bytes;
    return result(cudaSuccess);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    memset(attributes, 0, sizeof *attributes);
    block *b = find_block(ptr, 0);
    attributes->type = !b ? cudaMemoryTypeUnregistered : b->kind == DEVICE_MEMORY ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    attributes->device = fake.current;
    if (b && b->kind == DEVICE_MEMORY)
        attributes->devicePointer = (void *)ptr;
    else if (b)
        attributes->hostPointer = (void *)ptr;
    return result(cudaSuccess);
}

/* ---- what queued work may touch ---- */

int fakecuda_need(const void *ptr, size_t bytes, const char *what)
{
    if (bytes == 0 || fakecuda_is_device(ptr, bytes))
        return 1;
    fakecuda_complain("%s: %s at %p (%zu bytes) is not inside one device allocation (it is %s): "
                      "on a GPU an illegal address; the error is sticky", fakecuda_running_task(), what, ptr, bytes,
                      kind_of(ptr));
    fakecuda_fault();
    return 0;
}

void fakecuda_graph_execs(int delta)
{
    fakecuda_lock();
    fake.graph_execs += delta;
    while (fake.graph_execs == 0 && fake.quarantine) {
        block *b = fake.quarantine;
        fake.quarantine = b->next;
        munmap(b->map, b->map_bytes);
        free(b);
    }
    fakecuda_unlock();
}

size_t fakecuda_live_device_allocations(void)
{
    size_t count = 0;
    for (block *b = fake.blocks; b; b = b->next)
        count += b->kind == DEVICE_MEMORY;
    return count;
}

void fakecuda_count_handle(int delta)
{
    fake.handles += delta;
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t e = fakecuda_capture_forbids(NULL, "cudaDeviceSynchronize");
    return result(e != cudaSuccess ? e : fakecuda_synchronize());
}

/* ---- copies ---- */

typedef struct copy_args {
    void *dst;
    const void *src;
    size_t bytes;
    int value; /* memset's byte, or -1 for a copy */
} copy_args;

static void run_copy(void *raw)
{
    copy_args *a = raw;
    if (a->value >= 0)
        memset(a->dst, a->value, a->bytes);
    else
        memmove(a->dst, a->src, a->bytes);
}

static const char *direction_name(enum cudaMemcpyKind kind)
{
    static const char *names[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                  "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
    return (unsigned)kind < 5 ? names[kind] : "an unknown direction";
}

/* The direction must match the pointers: the destination (source) is device memory exactly
 * when the direction says so; cudaMemcpyDefault infers it, as unified addressing does. */
static cudaError_t check_direction(const char *call, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    int dst_device = fakecuda_is_device(dst, bytes), src_device = fakecuda_is_device(src, bytes);
    if ((unsigned)kind > cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    if (kind == cudaMemcpyDefault) {
        int partly = (!dst_device && find_block(dst, 0) && find_block(dst, 0)->kind == DEVICE_MEMORY) ||
                     (!src_device && find_block(src, 0) && find_block(src, 0)->kind == DEVICE_MEMORY);
        if (!partly)
            return cudaSuccess;
    } else if (dst_device == (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) &&
               src_device == (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice)) {
        return cudaSuccess;
    }
    fakecuda_complain("%s(dst %p: %s, src %p: %s, %zu bytes, %s): the pointers do not match the direction "
                      "(or run past their allocation)", call, dst, kind_of(dst), src, kind_of(src), bytes,
                      direction_name(kind));
    return cudaErrorInvalidValue;
}

/* FAKECUDA_COUNT_COPIES=1: the copies between host and device and their bytes, by direction
 * (0 down to the host, 1 up to the device), reported at exit, so a test sees what crosses the
 * bus; under the lock. */
static struct {
    long count[2];
    size_t bytes[2];
    pid_t counting;
} copies;

static void report_copies(void)
{
    if (getpid() == copies.counting)
        fprintf(stderr, "fakecuda: copies device->host: %ld (%zu bytes), host->device: %ld (%zu bytes)\n",
                copies.count[0], copies.bytes[0], copies.count[1], copies.bytes[1]);
}

static void count_copy(const void *dst, const void *src, size_t bytes)
{
    int down = fakecuda_is_device(src, bytes) && !fakecuda_is_device(dst, bytes);
    int up = fakecuda_is_device(dst, bytes) && !fakecuda_is_device(src, bytes);
    const char *count = getenv("FAKECUDA_COUNT_COPIES");
    fakecuda_lock();
    if (!copies.counting && count && strcmp(count, "1") == 0) {
        copies.counting = getpid();
        atexit(report_copies);
    }
    if (copies.counting && (down || up)) {
        copies.count[up]++;
        copies.bytes[up] += bytes;
    }
    fakecuda_unlock();
}

/* Queues a checked copy on `stream`; with `wait`, returns once it has run. */
static cudaError_t queue_copy(const char *call, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                              cudaStream_t stream, int wait)
{
    if (fakecuda_sticky() != cudaSuccess)
        return fakecuda_sticky();
    cudaError_t e = check_direction(call, dst, src, bytes, kind);
    /* A copy the host waits for cannot be captured (cudaMemcpy: while any stream captures). */
    if (e == cudaSuccess && wait)
        e = fakecuda_capture_forbids(stream, call);
    if (e != cudaSuccess)
        return result(e);
    count_copy(dst, src, bytes);
    copy_args a = {dst, src, bytes, -1};
    long id = 0;
    e = fakecuda_enqueue_on(stream, run_copy, &a, sizeof a, call, &id);
    return result(e == cudaSuccess && wait ? fakecuda_wait(id) : e);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    return queue_copy("cudaMemcpy", dst, src, bytes, kind, NULL, 1);
}

/* Copies from or to pageable memory complete before returning, as the real runtime's do;
 * page-locked ones run when the stream reaches them. */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    int pageable = !find_block(dst, 0) || !find_block(src, 0);
    return queue_copy("cudaMemcpyAsync", dst, src, bytes, kind, stream, pageable);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream)
{
    if (fakecuda_sticky() != cudaSuccess)
        return fakecuda_sticky();
    if (!fakecuda_is_device(dst, bytes)) {
        fakecuda_complain("cudaMemsetAsync(%p: %s, %zu bytes): not device memory of one allocation", dst, kind_of(dst), bytes);
        return result(cudaErrorInvalidValue);
    }
    copy_args a = {dst, NULL, bytes, value & 0xff};
    return result(fakecuda_enqueue_on(stream, run_copy, &a, sizeof a, "cudaMemsetAsync", NULL));
}
