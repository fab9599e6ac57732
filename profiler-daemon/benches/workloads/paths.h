/* Many distinct call stacks from a few lines of C: 32 functions that call
 * each other through a table, the path chosen by the bits of a seed, so that
 * a call of depth D can take 32^D different paths. Frame pointers and
 * noinline keep every function a frame of its own. */
#ifndef PATHS_H
#define PATHS_H

typedef void (*step_fn)(unsigned depth, unsigned long seed, unsigned long work);
extern step_fn steps[32];

__attribute__((noinline)) static void leaf_work(unsigned long work)
{
	volatile unsigned long sink = 0;
	for (unsigned long i = 0; i < work; i++)
		sink += i * i;
}

#define STEP(n)                                                                  \
	__attribute__((noinline, noclone)) void step_##n(unsigned depth,         \
							  unsigned long seed,     \
							  unsigned long work)     \
	{                                                                        \
		if (depth == 0)                                                  \
			leaf_work(work);                                         \
		else                                                             \
			steps[seed % 32](depth - 1, seed / 32, work);            \
		__asm__ volatile("" ::: "memory"); /* no tail call */            \
	}

STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13) STEP(14) STEP(15)
STEP(16) STEP(17) STEP(18) STEP(19) STEP(20) STEP(21) STEP(22) STEP(23)
STEP(24) STEP(25) STEP(26) STEP(27) STEP(28) STEP(29) STEP(30) STEP(31)

step_fn steps[32] = {
	step_0,  step_1,  step_2,  step_3,  step_4,  step_5,  step_6,  step_7,
	step_8,  step_9,  step_10, step_11, step_12, step_13, step_14, step_15,
	step_16, step_17, step_18, step_19, step_20, step_21, step_22, step_23,
	step_24, step_25, step_26, step_27, step_28, step_29, step_30, step_31,
};

/* xorshift64: a fixed, fast sequence of seeds. */
static unsigned long next_seed(unsigned long *state)
{
	unsigned long x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

#endif
