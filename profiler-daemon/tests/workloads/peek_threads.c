/* Peek workload: three named threads, two busy in different functions and
 * one asleep in a blocking call, while the main thread waits for them.
 * With --no-handler it leaves SIGUSR1 at its default action (termination);
 * otherwise it counts the SIGUSR1s it receives. Runs until killed, or for
 * argv's seconds when a number is given. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t signals_received;
static volatile unsigned long sink;

static void on_usr1(int signal) {
    (void)signal;
    signals_received++;
}

__attribute__((noinline)) static void spin_alpha(void) {
    for (;;) {
        for (unsigned long i = 0; i < 1000000; i++) sink += i * 3;
    }
}

__attribute__((noinline)) static void spin_beta(void) {
    for (;;) {
        for (unsigned long i = 0; i < 1000000; i++) sink ^= i * 7;
    }
}

__attribute__((noinline)) static void sleep_long(void) {
    for (;;) {
        struct timespec hour = {3600, 0};
        nanosleep(&hour, NULL);
    }
}

static void *alpha_main(void *unused) { (void)unused; spin_alpha(); return NULL; }
static void *beta_main(void *unused) { (void)unused; spin_beta(); return NULL; }
static void *sleeper_main(void *unused) { (void)unused; sleep_long(); return NULL; }

int main(int argc, char **argv) {
    int handler = 1;
    int seconds = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-handler") == 0) handler = 0;
        else seconds = atoi(argv[i]);
    }
    if (handler) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = on_usr1;
        sigaction(SIGUSR1, &action, NULL);
    }
    pthread_t alpha, beta, sleeper;
    pthread_create(&alpha, NULL, alpha_main, NULL);
    pthread_setname_np(alpha, "spin-alpha");
    pthread_create(&beta, NULL, beta_main, NULL);
    pthread_setname_np(beta, "spin-beta");
    pthread_create(&sleeper, NULL, sleeper_main, NULL);
    pthread_setname_np(sleeper, "sleeper");
    if (seconds > 0) {
        sleep(seconds);
        return 0;
    }
    pthread_join(sleeper, NULL);
    return 0;
}
