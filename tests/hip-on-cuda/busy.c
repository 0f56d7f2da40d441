/*
 * busy.c - libhoc_busy.so, a GPU timeline recorder for an unmodified CUDA process (issue 27:
 * "GPU busy >= 80% of wall time during decode"; the device machine has no nsys, and Nsight
 * Compute serialises kernels, so neither gives busy time).
 *
 * The CUDA driver loads it through its injection hook: with CUDA_INJECTION64_PATH naming this
 * library, cuInit dlopens it and calls InitializeInjection() once, before any work is queued.
 * That function turns on CUPTI's Activity API for three record kinds only (the cheap ones):
 * CONCURRENT_KERNEL (kernels, without serialising them; kernels launched inside CUDA graphs
 * come as one record each, with their graph's id), MEMCPY and MEMSET. CUPTI fills 8 MiB
 * buffers from its own thread; each full buffer is written out as text lines, and at exit
 * (atexit) the rest is flushed (cuptiActivityFlushAll) and the file closed.
 *
 * Output: the file named by HOC_BUSY_OUT (default busy.tsv in the working directory at cuInit;
 * "%p" in the name becomes the process id, for the ranks of a multi-process run),
 * one line per record, tab-separated, times in ns on CUPTI's clock:
 *     kind  start_ns  end_ns  stream_id  name
 * kind is kernel, memcpy or memset; a kernel's name is as CUPTI reports it (mangled or not),
 * a copy's memcpy_HtoD, memcpy_DtoH, memcpy_DtoD, ..., a fill's memset. Lines starting with '#'
 * are notes: a header, `# dropped\tN\t...` when CUPTI lost records (busy.py warns), and
 * `# end\t...` with the totals and the number of failed CUPTI calls, written at exit (its
 * absence means the process did not exit normally, and the last buffers are missing).
 * Records are in buffer order, not time order: readers sort them (busy.py does).
 *
 * Every CUPTI call's result is checked; a failure is printed to stderr (cuptiGetResultString)
 * and counted, never fatal: the host program runs on, traced or not.
 *
 * Build: tests/hip-on-cuda/busy.sh OUT (finds CUPTI; OUT/libhoc_busy.so). Use:
 *     CUDA_INJECTION64_PATH=OUT/libhoc_busy.so HOC_BUSY_OUT=busy.tsv ./program
 *     python3 tests/hip-on-cuda/busy.py busy.tsv
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cupti_activity.h> /* CUPTI's Activity API (pulls in cuda.h and cupti_result.h) */
#include <cupti_version.h>  /* CUPTI_API_VERSION, cuptiGetVersion */

#define HOC_EXPORT __attribute__((visibility("default")))

/* Record layouts: the newest of each kind this CUPTI's header has. CUPTI only ever appends
 * fields to a record kind's newer versions, and we read the leading ones (start, end,
 * streamId, name, copyKind), so these agree with the records the linked library writes.
 * CUPTI_API_VERSION is 18 in CUDA 12.1, 28 in 12.9, 130001 in 13.0. */
#if !defined(CUPTI_API_VERSION) || CUPTI_API_VERSION < 18
#error "busy.c needs the CUPTI of CUDA 12 or newer (CUpti_ActivityKernel9)"
#elif CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 hoc_kernel_t;
#else
typedef CUpti_ActivityKernel9 hoc_kernel_t;
#endif
#if CUPTI_API_VERSION >= 28
typedef CUpti_ActivityMemcpy6 hoc_memcpy_t;
#else
typedef CUpti_ActivityMemcpy5 hoc_memcpy_t;
#endif
typedef CUpti_ActivityMemset4 hoc_memset_t;

/* Activity buffers: large, so that CUPTI's thread rarely asks for one; aligned as CUPTI
 * requires (8 bytes). */
#define HOC_BUF_BYTES ((size_t)8 << 20)
#define HOC_BUF_ALIGN 8

/* The one trace of this process. `lock` guards `out` and the counters (CUPTI's worker thread
 * completes buffers while the program runs; at exit the flush completes the rest). */
static struct {
    pthread_mutex_t lock;
    FILE *out;         /* NULL: not tracing (open failed, or closed at exit) */
    char path[4096];
    int started;       /* InitializeInjection ran (atomic exchange) */
    int registered;    /* buffer callbacks registered: flush at exit */
    unsigned long long kernels, in_graphs, memcpys, memsets, others, dropped, lost_buffers;
    unsigned long long errors; /* failed CUPTI calls (atomic: also counted outside `lock`) */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Whether a CUPTI call succeeded; prints and counts a failure (never aborts). */
static int hoc_ok(CUptiResult r, const char *what)
{
    if (r == CUPTI_SUCCESS) return 1;
    const char *msg = NULL;
    if (cuptiGetResultString(r, &msg) != CUPTI_SUCCESS || msg == NULL) msg = "unknown error";
    fprintf(stderr, "hoc_busy: %s failed: %s (%d)\n", what, msg, (int)r);
    __atomic_add_fetch(&g.errors, 1, __ATOMIC_RELAXED);
    return 0;
}

/* The memcpy name of a CUpti_ActivityMemcpyKind: memcpy_HtoD etc. */
static const char *hoc_copy_name(uint8_t kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy_HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy_DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "memcpy_HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "memcpy_AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "memcpy_AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "memcpy_AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "memcpy_DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy_DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy_HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy_PtoP";
    default: return "memcpy_unknown";
    }
}

/* One record as a text line (caller holds `lock`, `g.out` open). Kernels are kept whatever
 * their launch (plain, graph node, cooperative): nothing is filtered here. */
static void hoc_write_record(const CUpti_Activity *rec)
{
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL: /* not enabled; the same layout if another tool did */
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const hoc_kernel_t *k = (const hoc_kernel_t *)rec;
        fprintf(g.out, "kernel\t%llu\t%llu\t%u\t%s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->streamId, k->name ? k->name : "?");
        g.kernels++;
        if (k->graphId != 0) g.in_graphs++;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const hoc_memcpy_t *c = (const hoc_memcpy_t *)rec;
        fprintf(g.out, "memcpy\t%llu\t%llu\t%u\t%s\n", (unsigned long long)c->start,
                (unsigned long long)c->end, c->streamId, hoc_copy_name(c->copyKind));
        g.memcpys++;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const hoc_memset_t *s = (const hoc_memset_t *)rec;
        fprintf(g.out, "memset\t%llu\t%llu\t%u\tmemset\n", (unsigned long long)s->start,
                (unsigned long long)s->end, s->streamId);
        g.memsets++;
        break;
    }
    default:
        g.others++;
        break;
    }
}

/* CUPTI asks for an empty buffer. Returning none (out of memory) makes CUPTI drop records,
 * which the completion callback then reports. */
static void CUPTIAPI hoc_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    void *p = NULL;
    if (posix_memalign(&p, HOC_BUF_ALIGN, HOC_BUF_BYTES) != 0) {
        fprintf(stderr, "hoc_busy: no memory for an activity buffer: records will be dropped\n");
        p = NULL;
    }
    *buffer = p;
    *size = p ? HOC_BUF_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

/* CUPTI hands back a filled buffer: write its records, note dropped ones, free it. */
static void CUPTIAPI hoc_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                         size_t size, size_t valid)
{
    (void)size;
    if (buffer == NULL) return;
    pthread_mutex_lock(&g.lock);
    if (g.out == NULL) {
        g.lost_buffers++; /* after the file was closed: nowhere to write */
    } else {
        CUpti_Activity *rec = NULL;
        for (;;) {
            CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &rec);
            if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break; /* end of the buffer */
            if (!hoc_ok(r, "cuptiActivityGetNextRecord")) break;
            hoc_write_record(rec);
        }
        size_t dropped = 0;
        if (hoc_ok(cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped),
                   "cuptiActivityGetNumDroppedRecords") &&
            dropped != 0) {
            fprintf(g.out, "# dropped\t%zu\tWARNING: CUPTI dropped %zu records (stream %u)\n",
                    dropped, dropped, stream_id);
            g.dropped += dropped;
        }
    }
    pthread_mutex_unlock(&g.lock);
    free(buffer);
}

/* At exit: flush what CUPTI still holds (forced: also records of work not yet complete),
 * write the totals, close the file. Runs once; the program's exit code is left alone. */
static void hoc_at_exit(void)
{
    if (g.registered) {
        /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED == 1: completes every buffer, synchronously. */
        hoc_ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    }
    pthread_mutex_lock(&g.lock);
    if (g.out != NULL) {
        unsigned long long errors = __atomic_load_n(&g.errors, __ATOMIC_RELAXED);
        fprintf(g.out,
                "# end\tkernels %llu (in graphs %llu)\tmemcpy %llu\tmemset %llu\tother %llu"
                "\tdropped %llu\tcupti_errors %llu\n",
                g.kernels, g.in_graphs, g.memcpys, g.memsets, g.others, g.dropped, errors);
        if (fclose(g.out) != 0) perror("hoc_busy: closing the output");
        g.out = NULL;
        fprintf(stderr,
                "hoc_busy: %llu kernels (%llu in graphs), %llu memcpy, %llu memset -> %s%s\n",
                g.kernels, g.in_graphs, g.memcpys, g.memsets, g.path,
                g.dropped ? " (RECORDS DROPPED)" : "");
    }
    pthread_mutex_unlock(&g.lock);
}

/* The injection entry point: cuInit calls it once (a second call does nothing). Returns 1
 * always: a tracing problem is reported, and the program runs on untraced. */
HOC_EXPORT int InitializeInjection(void)
{
    if (__atomic_exchange_n(&g.started, 1, __ATOMIC_SEQ_CST)) return 1;

    const char *path = getenv("HOC_BUSY_OUT");
    if (path == NULL || path[0] == '\0') path = "busy.tsv";
    /* "%p" in the name stands for the process id: the ranks of a multi-process run, which
     * inherit one environment, each write a file of their own. */
    const char *pid_at = strstr(path, "%p");
    if (pid_at != NULL)
        snprintf(g.path, sizeof g.path, "%.*s%d%s", (int)(pid_at - path), path, (int)getpid(), pid_at + 2);
    else
        snprintf(g.path, sizeof g.path, "%s", path);
    FILE *out = fopen(g.path, "w");
    if (out == NULL) {
        fprintf(stderr, "hoc_busy: cannot open %s for writing: not tracing\n", g.path);
        perror("hoc_busy");
        return 1;
    }
    setvbuf(out, NULL, _IOFBF, (size_t)1 << 20);
    uint32_t version = 0;
    if (hoc_ok(cuptiGetVersion(&version), "cuptiGetVersion") && version != CUPTI_API_VERSION)
        fprintf(stderr, "hoc_busy: CUPTI API version %u at run time, %u at build time\n",
                (unsigned)version, (unsigned)CUPTI_API_VERSION);
    fprintf(out, "# hoc_busy\tpid %d\tCUPTI API %u\tkind\tstart_ns\tend_ns\tstream_id\tname\n",
            (int)getpid(), (unsigned)version);

    pthread_mutex_lock(&g.lock);
    g.out = out;
    pthread_mutex_unlock(&g.lock);
    if (atexit(hoc_at_exit) != 0)
        fprintf(stderr, "hoc_busy: atexit failed: %s will miss its last records\n", g.path);

    if (!hoc_ok(cuptiActivityRegisterCallbacks(hoc_buffer_requested, hoc_buffer_completed),
                "cuptiActivityRegisterCallbacks"))
        return 1; /* nothing enabled: the file gets its header and end line only */
    g.registered = 1;
    hoc_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
           "cuptiActivityEnable(CONCURRENT_KERNEL)");
    hoc_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
    hoc_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)");
    return 1;
}
