/* A process that execs itself over and over: each program busy in
 * exec_busy for argv[2] milliseconds (default 20), then executing itself
 * again, argv[1] more times (default 100). The process id stays the same;
 * its memory map changes (ASLR) at every exec. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) unsigned long exec_busy(double ms)
{
	volatile unsigned long sink = 0;
	double end = now() + ms / 1000;
	while (now() < end)
		for (unsigned long i = 0; i < 10000; i++)
			sink += i * i;
	return sink;
}

int main(int argc, char **argv)
{
	int left = argc > 1 ? atoi(argv[1]) : 100;
	const char *ms = argc > 2 ? argv[2] : "20";
	exec_busy(atof(ms));
	if (left > 0) {
		char more[16];
		snprintf(more, sizeof more, "%d", left - 1);
		execl("/proc/self/exe", argv[0], more, ms, (char *)NULL);
		perror("execl");
		return 1;
	}
	return 0;
}
