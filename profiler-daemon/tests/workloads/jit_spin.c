/* Runs code from anonymous memory, as a JIT does, and names it in a perf
 * map as node --perf-basic-prof would:
 *
 *   jit_spin [MIB_BEFORE [MIB_AFTER]]
 *
 * writes /tmp/perf-PID.map with MIB_BEFORE MiB of lines naming other code,
 * then the line naming the code it runs ("JIT:jit_hot_loop"), then
 * MIB_AFTER MiB of other lines; `jit_spin --no-map` writes none (the test
 * puts something else there). Prints the code's address on a line, then
 * spins in it until killed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* mov %rdi,%rcx; 1: dec %rcx; jnz 1b; ret */
static const unsigned char hot_loop[] = {0x48, 0x89, 0xf9, 0x48, 0xff,
					 0xc9, 0x75, 0xfb, 0xc3};

static void other_lines(FILE *map, long mib, unsigned long *next)
{
	long bytes = mib << 20, written = 0;
	while (written < bytes) {
		int line = fprintf(map,
				   "%lx 40 LazyCompile:*filler_function_%lu "
				   "/srv/app/node_modules/lib/index.js:%lu:17\n",
				   *next, *next, *next % 9973);
		if (line < 0)
			exit(1);
		written += line;
		*next += 0x40;
	}
}

int main(int argc, char **argv)
{
	unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy(code, hot_loop, sizeof hot_loop);
	if (argc < 2 || strcmp(argv[1], "--no-map") != 0) {
		long before = argc > 1 ? atol(argv[1]) : 0;
		long after = argc > 2 ? atol(argv[2]) : 0;
		char path[64];
		snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
		FILE *map = fopen(path, "w");
		if (!map)
			return 1;
		/* Other code lies far above this mapping. */
		unsigned long next = (unsigned long)code + (1UL << 32);
		other_lines(map, before, &next);
		fprintf(map, "%lx %zx JIT:jit_hot_loop\n", (unsigned long)code,
			sizeof hot_loop);
		other_lines(map, after, &next);
		fclose(map);
	}
	printf("%lx\n", (unsigned long)code);
	fflush(stdout);
	void (*spin)(unsigned long) = (void (*)(unsigned long))code;
	for (;;)
		spin(100000000);
}
