/* Asks the time in a loop: main -> rd -> clock_gettime, which runs in the
 * vDSO (__vdso_clock_gettime), code the kernel maps with no file behind
 * it. The function is named `rd` on purpose: a plain C name that C++'s
 * demangler reads as a type (`double restrict`). Runs until killed. */
#include <time.h>

__attribute__((noinline, noclone)) long rd(void)
{
	struct timespec now;
	long sum = 0;
	for (int i = 0; i < 1000; i++) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		sum += now.tv_nsec;
	}
	return sum;
}

int main(void)
{
	volatile long sink = 0;
	for (;;)
		sink += rd();
}
