/* Many distinct stacks: each round walks a random path down a binary tree
 * of calls (branch_a or branch_b at each level, 8 to 15 levels deep) and
 * spins briefly at the bottom, so nearly every sample has a stack of its
 * own. Runs for argv[1] seconds (default: until killed). */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline, noclone)) void leaf_spin(void)
{
	for (unsigned long i = 0; i < 20000; i++)
		sink += i * i;
}

void branch_b(unsigned long path, int depth);

__attribute__((noinline, noclone)) void branch_a(unsigned long path, int depth)
{
	if (depth == 0)
		leaf_spin();
	else if (path & 1)
		branch_a(path >> 1, depth - 1);
	else
		branch_b(path >> 1, depth - 1);
	sink++; /* not a tail call: each level keeps its frame */
}

__attribute__((noinline, noclone)) void branch_b(unsigned long path, int depth)
{
	if (depth == 0)
		leaf_spin();
	else if (path & 1)
		branch_a(path >> 1, depth - 1);
	else
		branch_b(path >> 1, depth - 1);
	sink++;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	double end = now() + seconds;
	srandom(time(NULL));
	while (seconds <= 0 || now() < end) {
		unsigned long path = (unsigned long)random();
		branch_a(path, 8 + (int)(path % 8));
	}
	return 0;
}
