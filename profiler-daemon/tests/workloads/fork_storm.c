/* Process storm: forks argv[1] children in all (bounded to 5000), at most
 * argv[2] at a time (bounded to 64); each spins in child_work for about
 * argv[3] milliseconds of wall time and exits, or, given a program as
 * argv[4], execs it (as a shell's child works a little before it runs its
 * command). Exits once every child is reaped, with status 0 if they all
 * exited cleanly.
 *
 * `fork_storm orphans N MS`: forks N children (bounded to 2000), one at a
 * time; each forks a grandchild and exits at once, and the grandchild (its
 * parent gone, never having mapped the program it runs) spins in
 * child_work for about MS milliseconds. Lingers half a second at the end
 * for the last grandchildren. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) void child_work(double seconds)
{
	volatile unsigned long sink = 0;
	double end = now() + seconds;
	while (now() < end)
		for (unsigned long i = 0; i < 10000; i++)
			sink += i * i;
}

__attribute__((noinline, noclone)) int orphans(int total, double seconds)
{
	if (total < 0 || total > 2000)
		return 2;
	for (int started = 0; started < total; started++) {
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child == 0) {
			if (fork() == 0)
				child_work(seconds);
			_exit(0);
		}
		waitpid(child, NULL, 0);
		/* One grandchild at work at a time, about. */
		struct timespec pause = {0, (long)(seconds * 1e9)};
		nanosleep(&pause, NULL);
	}
	struct timespec linger = {0, 500000000};
	nanosleep(&linger, NULL);
	return 0;
}

int main(int argc, char **argv)
{
	/* (exit, not return: main stays on the stack, no tail call.) */
	if (argc == 4 && strcmp(argv[1], "orphans") == 0)
		exit(orphans(atoi(argv[2]), atof(argv[3]) / 1000.0));
	int total = argc > 1 ? atoi(argv[1]) : 100;
	int parallel = argc > 2 ? atoi(argv[2]) : 4;
	double seconds = (argc > 3 ? atof(argv[3]) : 1.0) / 1000.0;
	if (total < 0 || total > 5000 || parallel < 1 || parallel > 64)
		return 2;
	int running = 0, failed = 0;
	for (int started = 0; started < total; started++) {
		if (running == parallel) {
			int status;
			if (wait(&status) > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
				failed++;
			running--;
		}
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			child_work(seconds);
			if (argc > 4) {
				execv(argv[4], argv + 4);
				_exit(127);
			}
			_exit(0);
		}
		running++;
	}
	int status;
	while (wait(&status) > 0)
		if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			failed++;
	return failed ? 1 : 0;
}
