/* Four threads recursing 100 levels deep in frames of about 1 KiB, each
 * with its stack pointer at another place in its page (an alloca of 0, 1,
 * 2 or 3 KiB first), spinning in deep_leaf. A copy of a fixed size from
 * the stack pointer holds as many frames in every thread; one from the
 * start of the stack pointer's page holds up to three fewer. The threads
 * start after the main thread has spun 300 ms (a profiler reading the
 * process's memory map at its first sample sees no thread stack yet).
 * Runs until killed. */
#define _GNU_SOURCE
#include <alloca.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline, noclone)) void deep_leaf(void)
{
	for (;;)
		sink++;
}

__attribute__((noinline, noclone)) void recurse(int depth)
{
	volatile char pad[1000];
	pad[0] = (char)depth;
	pad[999] = 0;
	if (depth == 0)
		deep_leaf();
	else
		recurse(depth - 1);
	sink += pad[0] + pad[999];
}

static void *thread_main(void *arg)
{
	long shift = (long)arg;
	char name[16];
	snprintf(name, sizeof name, "deep-%ld", shift / 1024);
	pthread_setname_np(pthread_self(), name);
	volatile char *skip = alloca(shift + 16);
	skip[0] = 0;
	recurse(100);
	return (void *)skip;
}

static double seconds(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec + now.tv_nsec / 1e9;
}

int main(void)
{
	pthread_t threads[4];
	double start = seconds();
	while (seconds() - start < 0.3)
		sink++;
	for (long i = 0; i < 4; i++)
		pthread_create(&threads[i], 0, thread_main, (void *)(i * 1024));
	pthread_join(threads[0], 0);
	return 0;
}
