/* Grandchildren whose parent is gone: forks argv[1] children (bounded to
 * 2000), one at a time; each forks a grandchild and exits at once, and the
 * grandchild (reparented, its parent gone, never having mapped the program
 * it runs) spins in grandchild_work for about argv[2] milliseconds and
 * exits. Waits argv[3] seconds at the end for the last grandchildren. */
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) void grandchild_work(double seconds)
{
	volatile unsigned long sink = 0;
	double end = now() + seconds;
	while (now() < end)
		for (unsigned long i = 0; i < 10000; i++)
			sink += i * i;
}

int main(int argc, char **argv)
{
	int total = argc > 1 ? atoi(argv[1]) : 100;
	double seconds = (argc > 2 ? atof(argv[2]) : 4.0) / 1000.0;
	double linger = argc > 3 ? atof(argv[3]) : 0.5;
	if (total < 0 || total > 2000)
		return 2;
	for (int started = 0; started < total; started++) {
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child == 0) {
			if (fork() == 0) {
				grandchild_work(seconds);
				_exit(0);
			}
			_exit(0);
		}
		int status;
		waitpid(child, &status, 0);
		/* One grandchild at work at a time, about. */
		struct timespec pause = {0, (long)(seconds * 1e9)};
		nanosleep(&pause, NULL);
	}
	struct timespec end = {(time_t)linger, (long)((linger - (time_t)linger) * 1e9)};
	nanosleep(&end, NULL);
	return 0;
}
