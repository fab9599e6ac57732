/* A program with a few MiB of debug information: 5000 functions, each with
 * a local of a struct type of its own (the preprocessor writes them), and
 * churned_hot_leaf, which it spins in for the seconds argv[1] says (1 by
 * default). Copies of it, run one after another, are what a machine that
 * builds and runs programs shows the symbolizer: binaries it has never
 * parsed. */
#include <stdlib.h>
#include <time.h>

#define FUNCTION(n)                                                            \
	struct record_##n {                                                    \
		long first_##n, count_##n, total_##n, limit_##n;               \
		double second_##n, ratio_##n, scale_##n;                       \
		unsigned flags_##n, mask_##n;                                  \
		char name_##n[16], label_##n[8];                               \
	};                                                                     \
	__attribute__((noinline)) long function_##n(long v)                   \
	{                                                                      \
		struct record_##n r = {v, v + 1, v + 2, v + 3, v * 0.5,        \
				       v * 0.25, 2.0, 1, 3, "r", "l"};         \
		long sum_##n = r.first_##n + r.count_##n + r.total_##n;        \
		double mix_##n = r.second_##n * r.ratio_##n * r.scale_##n;     \
		return sum_##n + r.limit_##n + (long)mix_##n + r.flags_##n +   \
		       r.mask_##n + r.name_##n[0] + r.label_##n[0];            \
	}
#define TEN(n)                                                                 \
	FUNCTION(n##0) FUNCTION(n##1) FUNCTION(n##2) FUNCTION(n##3)            \
	FUNCTION(n##4) FUNCTION(n##5) FUNCTION(n##6) FUNCTION(n##7)            \
	FUNCTION(n##8) FUNCTION(n##9)
#define HUNDRED(n)                                                             \
	TEN(n##0) TEN(n##1) TEN(n##2) TEN(n##3) TEN(n##4) TEN(n##5) TEN(n##6) \
	TEN(n##7) TEN(n##8) TEN(n##9)
#define THOUSAND(n)                                                            \
	HUNDRED(n##0) HUNDRED(n##1) HUNDRED(n##2) HUNDRED(n##3) HUNDRED(n##4) \
	HUNDRED(n##5) HUNDRED(n##6) HUNDRED(n##7) HUNDRED(n##8) HUNDRED(n##9)

THOUSAND(1)
THOUSAND(2)
THOUSAND(3)
THOUSAND(4)
THOUSAND(5)

__attribute__((noinline)) long churned_hot_leaf(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += function_1007(i) ^ function_5999(i);
	return s;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 1;
	struct timespec start, now;
	long s = 0;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		/* An argument of its own each time: the call cannot be hoisted. */
		s += churned_hot_leaf(100000 + (s & 1));
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 <
		 seconds);
	return (int)(s & 1);
}
