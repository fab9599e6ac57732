/* A known chain for checking unwinding: main -> drive -> hot_leaf, every
 * function kept out of line. hot_leaf is a leaf: built with gcc, it gets no
 * frame pointer of its own even with -fno-omit-frame-pointer, so walking
 * frame pointers from it skips drive. With argv[2] == "qsort", the work is
 * done instead by a comparison callback that libc's qsort calls:
 * main -> sort_drive -> qsort (libc) -> ... -> compare_slowly.
 * Runs for argv[1] seconds (default: until killed). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline, noclone)) unsigned long hot_leaf(unsigned long n)
{
	unsigned long acc = 0;
	for (unsigned long i = 0; i < n; i++)
		acc += (i * i) ^ (acc >> 3);
	return acc;
}

__attribute__((noinline, noclone)) unsigned long drive(double seconds)
{
	unsigned long total = 0;
	double end = now() + seconds;
	while (seconds <= 0 || now() < end)
		total += hot_leaf(5000000);
	return total;
}

__attribute__((noinline, noclone)) int compare_slowly(const void *a, const void *b)
{
	volatile unsigned long sink = 0;
	for (unsigned long i = 0; i < 2000; i++)
		sink += i;
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

__attribute__((noinline, noclone)) unsigned long sort_drive(double seconds)
{
	enum { N = 4096 };
	static long values[N];
	unsigned long rounds = 0;
	double end = now() + seconds;
	while (seconds <= 0 || now() < end) {
		for (long i = 0; i < N; i++)
			values[i] = (i * 7919) % N;
		qsort(values, N, sizeof values[0], compare_slowly);
		rounds++;
	}
	return rounds;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	if (argc > 2 && strcmp(argv[2], "qsort") == 0)
		return sort_drive(seconds) == 0;
	return drive(seconds) == 42;
}
