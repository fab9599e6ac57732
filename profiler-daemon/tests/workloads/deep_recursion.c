/* A thread (not the main one) recursing 300 levels deep in frames of about
 * 224 bytes (67 KiB of stack, more than a 16 KiB copy holds), spinning in
 * recursion_leaf at the bottom. Runs until killed.
 *
 * `deep_recursion main SECONDS`: the main thread itself recurses 100
 * levels (22 KiB, more than a copy, less than a deep thread's) and spins
 * SECONDS there, then exits: a short-lived program deep from its start, as
 * Python is while it imports.
 *
 * `deep_recursion narrow`: the thread recurses 800 levels in frames of
 * about 48 bytes (38 KiB, within a deep thread's copy), deeper than the
 * frames the daemon walks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static double spin_seconds = -1;

static double now(void)
{
	struct timespec at;
	clock_gettime(CLOCK_MONOTONIC, &at);
	return at.tv_sec + at.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) void recursion_leaf(void)
{
	if (spin_seconds < 0) {
		for (;;)
			sink++;
	}
	double until = now() + spin_seconds;
	while (now() < until)
		for (int i = 0; i < 1000; i++)
			sink++;
}

__attribute__((noinline, noclone)) void descend(int depth)
{
	volatile char pad[192];
	pad[0] = (char)depth;
	pad[191] = 0;
	if (depth == 0)
		recursion_leaf();
	else
		descend(depth - 1);
	sink += pad[0] + pad[191];
}

__attribute__((noinline, noclone)) void narrow_descend(int depth)
{
	volatile char pad[16];
	pad[0] = (char)depth;
	if (depth == 0)
		recursion_leaf();
	else
		narrow_descend(depth - 1);
	sink += pad[0];
}

static int narrow;

static void *deep_thread(void *arg)
{
	(void)arg;
	if (narrow)
		narrow_descend(800);
	else
		descend(300);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "main") == 0) {
		spin_seconds = atof(argv[2]);
		descend(100);
		return 0;
	}
	narrow = argc == 2 && strcmp(argv[1], "narrow") == 0;
	pthread_t thread;
	if (pthread_create(&thread, NULL, deep_thread, NULL) != 0)
		return 1;
	pthread_join(thread, NULL);
	return 0;
}
