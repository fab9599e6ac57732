/* The scale benchmark's workload: for argv[1] seconds (or until SIGTERM),
 * keeps argv[2] child processes busy, each living 1 to 5 s and walking
 * random paths of depth 8, then replaced by a new one. The paths are drawn
 * from a fixed pool of argv[3] (default 10000), the first ones far more
 * often than the last (the index is the pool size times a uniform number
 * cubed), so that stacks are bounded and skewed as in a real service.
 * Prints the number of processes it started. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "paths.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long pool = 10000;

/* The i-th path of the pool: a fixed seed of at least 40 bits (8 levels of
 * 5 bits choose the functions). */
static unsigned long path(unsigned long i)
{
	unsigned long state = (i + 1) * 0x9e3779b97f4a7c15UL;
	return next_seed(&state);
}

/* A path index, skewed towards the start of the pool. */
static unsigned long pick(unsigned long *state)
{
	double u = (next_seed(state) >> 11) / 9007199254740992.0; /* [0, 1) */
	return (unsigned long)(pool * u * u * u);
}

static void child(unsigned long state)
{
	double end = now() + 1.0 + (state % 4000) / 1000.0;
	while (now() < end)
		for (int i = 0; i < 64; i++) {
			unsigned long seed = path(pick(&state));
			steps[seed % 32](8, seed / 32, 500);
		}
	_exit(0);
}

static unsigned long started;
static volatile sig_atomic_t stopping;

static void stop(int signal)
{
	(void)signal;
	stopping = 1;
}

static void spawn(unsigned long *state)
{
	unsigned long seed = next_seed(state);
	pid_t pid = fork();
	if (pid == 0)
		child(seed | 1);
	if (pid > 0)
		started++;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	int width = argc > 2 ? atoi(argv[2]) : 2;
	if (argc > 3)
		pool = strtoul(argv[3], 0, 10);
	if (pool == 0)
		pool = 1;
	unsigned long state = 0x9e3779b97f4a7c15UL;
	double end = now() + seconds;
	signal(SIGTERM, stop);
	for (int i = 0; i < width; i++)
		spawn(&state);
	while (!stopping && now() < end) {
		if (wait(NULL) > 0 && !stopping && now() < end)
			spawn(&state);
	}
	while (wait(NULL) > 0)
		;
	printf("processes %lu\n", started);
	return 0;
}
