#define _GNU_SOURCE
/* A process that changes users mid-run: started as root, it spins in
 * root_phase for argv[1] seconds, then switches to user and group 65534
 * (nobody) with setresgid/setresuid, makes itself dumpable again (a change
 * of credentials makes a process undumpable), and spins in nobody_phase
 * until killed. Its root phase belongs to root, whatever its pid and uid
 * are later. */
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) void root_phase(double seconds)
{
	double end = now() + seconds;
	while (now() < end)
		for (unsigned long i = 0; i < 100000; i++)
			sink += i * 3;
}

__attribute__((noinline, noclone)) void nobody_phase(void)
{
	for (;;)
		for (unsigned long i = 0; i < 100000; i++)
			sink ^= i * 7;
}

int main(int argc, char **argv)
{
	root_phase(argc > 1 ? atof(argv[1]) : 1.0);
	if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
		return 1;
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	nobody_phase();
	return 0;
}
