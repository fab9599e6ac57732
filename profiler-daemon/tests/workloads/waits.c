/* Off-CPU workload: each mode waits in a known way, after a first second
 * asleep (so that a profile started meanwhile records the waits whole).
 *   spin-sleep   the main thread spins 20 ms and sleeps 80 ms, for ever
 *   vfork        vfork()s a child that sleeps 300 ms, then sleeps
 *   runqueue     three threads pinned to CPU 0 spin for 3 s each, then sleep
 *   pipe         read()s an empty pipe for ever
 *   many         32 threads each sleep 5 ms, for ever
 *   pipe-spin    a thread spins while the main thread reads an empty pipe */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void spin_for(double seconds) {
    double end = now() + seconds;
    while (now() < end) {
        for (int i = 0; i < 1000; i++) sink += i;
    }
}

__attribute__((noinline)) static void sleep_for(double seconds) {
    struct timespec t = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL);
}

__attribute__((noinline)) static void spin_and_sleep(void) {
    for (;;) {
        spin_for(0.020);
        sleep_for(0.080);
    }
}

__attribute__((noinline)) static void wait_for_child(void) {
    pid_t child = vfork();
    if (child == 0) {
        struct timespec t = {0, 300 * 1000 * 1000};
        nanosleep(&t, NULL);
        _exit(0);
    }
}

static void *pinned_spinner(void *unused) {
    (void)unused;
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(0, &cpus);
    sched_setaffinity(0, sizeof cpus, &cpus);
    spin_for(3.0);
    /* Stays, so that its schedstat can be read after the profile. */
    for (;;) sleep_for(1.0);
    return NULL;
}

__attribute__((noinline)) static void compete_for_one_cpu(void) {
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, pinned_spinner, NULL);
    for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
}

__attribute__((noinline)) static void read_empty_pipe(void) {
    int ends[2];
    char byte;
    if (pipe(ends) == 0) read(ends[0], &byte, 1);
}

static void *napper(void *unused) {
    (void)unused;
    for (;;) sleep_for(0.005);
    return NULL;
}

__attribute__((noinline)) static void nap_in_many_threads(void) {
    pthread_t threads[32];
    for (int i = 0; i < 32; i++) pthread_create(&threads[i], NULL, napper, NULL);
    for (int i = 0; i < 32; i++) pthread_join(threads[i], NULL);
}

static void *spinner(void *unused) {
    (void)unused;
    spin_for(1e9);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "spin-sleep";
    if (strcmp(mode, "pipe-spin") == 0) {
        pthread_t thread;
        pthread_create(&thread, NULL, spinner, NULL);
        read_empty_pipe();
    }
    sleep_for(1.0);
    if (strcmp(mode, "spin-sleep") == 0) spin_and_sleep();
    if (strcmp(mode, "vfork") == 0) wait_for_child();
    if (strcmp(mode, "runqueue") == 0) compete_for_one_cpu();
    if (strcmp(mode, "pipe") == 0) read_empty_pipe();
    if (strcmp(mode, "many") == 0) nap_in_many_threads();
    for (;;) sleep_for(1.0);
}
