/* A CPU-bound workload with a known shape: main -> common -> {hot, cold},
 * hot doing three times the work of cold, so hot should get 75% of the
 * samples and cold 25%. hot's work is in hot_loop, inlined into it, and both
 * loop in spin, inlined too. Runs for argv[1] seconds (default: until killed).
 *
 * Each call of hot or cold runs for milliseconds, so that samples taken in
 * their few prologue and epilogue instructions (where a frame-pointer walk
 * cannot see the caller yet, or any more) are vanishingly rare. */
#include <stdlib.h>
#include <time.h>

#define UNITS 10000000UL

static inline __attribute__((always_inline)) void spin(unsigned long units)
{
	volatile unsigned long sink = 0;
	for (unsigned long i = 0; i < units; i++)
		sink += i * i;
}

static inline __attribute__((always_inline)) void hot_loop(void) { spin(3 * UNITS); }

__attribute__((noinline, noclone)) void hot(void) { hot_loop(); }

__attribute__((noinline, noclone)) void cold(void) { spin(UNITS); }

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) void common(double seconds)
{
	double end = now() + seconds;
	while (seconds <= 0 || now() < end) {
		hot();
		cold();
	}
}

int main(int argc, char **argv)
{
	common(argc > 1 ? atof(argv[1]) : 0);
	return 0;
}
