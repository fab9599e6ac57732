/* Allocation workload: each mode allocates in a known way, after a first
 * second asleep (so that a profile started meanwhile sees it all).
 *   ratio          for ever: site_three_quarters allocates 3 KiB a round (4 x
 *                  768 B), site_one_quarter 1 KiB (1 x 1024 B); all freed
 *   keep N         site_keep allocates N blocks of 4096 B and keeps them,
 *                  while site_churn allocates as much and frees it; then
 *                  sleeps
 *   count N        makes exactly N allocations of 100 B (each freed), then
 *                  sleeps
 *   calloc-realloc for ever: site_calloc callocs 64 x 32 B and
 *                  site_realloc grows a block by realloc to 8 KiB; all freed
 *   exit S         ratio for S seconds, then exits
 *   storm          for ever: site_storm mallocs and frees 64 B as fast as
 *                  it can, without a pause
 *   ring N         for ever: site_ring allocates a 16 KiB buffer every
 *                  5 ms and keeps the N most recent (freeing the oldest),
 *                  so that N are always held, all of them recent
 * Every site is reached from main through churn_round (or keep_and_churn,
 * or storm_round). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Sleeps `micros` microseconds: the allocating modes pause now and then,
 * so that their sampled allocations do not come faster than a profiler
 * at its default settings reads them. */
static void pause_for(long micros) {
    struct timespec t = {0, micros * 1000};
    nanosleep(&t, NULL);
}

static void pause_briefly(void) { pause_for(200); }

__attribute__((noinline)) static void site_three_quarters(void) {
    void *blocks[4];
    for (int i = 0; i < 4; i++) {
        blocks[i] = malloc(768);
        memset(blocks[i], 1, 768);
        sink = blocks[i];
    }
    for (int i = 0; i < 4; i++) free(blocks[i]);
}

__attribute__((noinline)) static void site_one_quarter(void) {
    void *block = malloc(1024);
    memset(block, 1, 1024);
    sink = block;
    free(block);
}

__attribute__((noinline)) static void churn_round(void) {
    site_three_quarters();
    site_one_quarter();
}

__attribute__((noinline)) static void *site_keep(void) {
    void *block = malloc(4096);
    memset(block, 2, 4096);
    return block;
}

__attribute__((noinline)) static void site_churn(void) {
    void *block = malloc(4096);
    memset(block, 3, 4096);
    sink = block;
    free(block);
}

__attribute__((noinline)) static void keep_and_churn(long blocks) {
    void **kept = calloc((size_t)blocks, sizeof *kept);
    for (long i = 0; i < blocks; i++) {
        kept[i] = site_keep();
        site_churn();
        if (i % 4 == 3) pause_for(2000);
    }
    sink = kept;
}

__attribute__((noinline)) static void site_counted(long count) {
    for (long i = 0; i < count; i++) {
        void *block = malloc(100);
        sink = block;
        free(block);
        if (i % 10 == 9) pause_for(2000);
    }
}

__attribute__((noinline)) static void site_calloc(void) {
    void *block = calloc(64, 32);
    sink = block;
    free(block);
}

__attribute__((noinline)) static void site_realloc(void) {
    void *block = NULL;
    for (size_t size = 1024; size <= 8192; size *= 2) {
        block = realloc(block, size);
        memset(block, 4, size);
    }
    sink = block;
    free(block);
}

__attribute__((noinline)) static void site_storm(void) {
    void *block = malloc(64);
    sink = block;
    free(block);
}

__attribute__((noinline)) static void storm_round(void) {
    for (int i = 0; i < 1024; i++) site_storm();
}

__attribute__((noinline)) static void *site_ring(void) {
    void *block = malloc(16384);
    memset(block, 5, 16384);
    return block;
}

__attribute__((noinline)) static void hold_a_ring(long held) {
    void **ring = calloc((size_t)held, sizeof *ring);
    for (long i = 0;; i = (i + 1) % held) {
        free(ring[i]);
        ring[i] = site_ring();
        sink = ring;
        pause_for(5000);
    }
}

static void sleep_for_ever(void) {
    for (;;) pause();
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ratio";
    long n = argc > 2 ? atol(argv[2]) : 0;
    usleep(1000 * 1000);
    if (!strcmp(mode, "keep")) {
        keep_and_churn(n);
        sleep_for_ever();
    } else if (!strcmp(mode, "count")) {
        site_counted(n);
        sleep_for_ever();
    } else if (!strcmp(mode, "ring")) {
        hold_a_ring(n > 0 ? n : 64);
    } else if (!strcmp(mode, "storm")) {
        for (;;) storm_round();
    } else if (!strcmp(mode, "calloc-realloc")) {
        for (;;) {
            site_calloc();
            site_realloc();
            pause_briefly();
        }
    } else {
        double end = !strcmp(mode, "exit") ? now() + (double)n : 1e300;
        for (long round = 0; now() < end; round++) {
            churn_round();
            if (round % 16 == 0) pause_briefly();
        }
    }
    return 0;
}
