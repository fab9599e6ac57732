/* Question 9's workload: PAIRS pairs of malloc and free in one thread,
 * alternating between site_a (SIZE_A bytes) and site_b (SIZE_B bytes).
 * Waits for a line on standard input before it starts (so that a profiler
 * attaches first), then prints the loop's seconds and the bytes each site
 * allocated:  <seconds> <site_a bytes> <site_b bytes>
 * Usage: malloc_pairs PAIRS SIZE_A SIZE_B */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *volatile sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void site_a(size_t size) {
    void *block = malloc(size);
    *(volatile char *)block = 1;
    sink = block;
    free(block);
}

__attribute__((noinline)) static void site_b(size_t size) {
    void *block = malloc(size);
    *(volatile char *)block = 2;
    sink = block;
    free(block);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: malloc_pairs PAIRS SIZE_A SIZE_B\n");
        return 2;
    }
    long pairs = atol(argv[1]);
    size_t size_a = (size_t)atol(argv[2]), size_b = (size_t)atol(argv[3]);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    double start = now();
    for (long i = 0; i < pairs; i++) {
        if (i % 2 == 0)
            site_a(size_a);
        else
            site_b(size_b);
    }
    double seconds = now() - start;
    long half = pairs / 2;
    printf("%.6f %ld %ld\n", seconds, (pairs - half) * (long)size_a, half * (long)size_b);
    return 0;
}
