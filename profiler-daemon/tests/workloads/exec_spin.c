/* Exec workload: spins in spin_before_exec for argv[1] seconds, then
 * replaces itself (same pid) with the program argv[2], given the arguments
 * that follow. */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) void spin_before_exec(double seconds)
{
	volatile unsigned long sink = 0;
	double end = now() + seconds;
	while (now() < end)
		for (unsigned long i = 0; i < 1000000; i++)
			sink += i * i;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	spin_before_exec(atof(argv[1]));
	execv(argv[2], argv + 2);
	return 1;
}
