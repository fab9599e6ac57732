/* The fixed CPU-bound workload of the overhead benchmark: argv[1] walks of
 * depth 6 through the path table (about 10^9 distinct stacks possible), each
 * ending in a short spin, from a seed given as argv[2] so that every run does
 * exactly the same work. */
#include <stdlib.h>

#include "paths.h"

int main(int argc, char **argv)
{
	unsigned long walks = argc > 1 ? strtoul(argv[1], 0, 10) : 100000;
	unsigned long state = argc > 2 ? strtoul(argv[2], 0, 10) : 88172645463325252UL;
	if (state == 0)
		state = 1;
	for (unsigned long i = 0; i < walks; i++)
		steps[next_seed(&state) % 32](6, next_seed(&state), 2000);
	return 0;
}
