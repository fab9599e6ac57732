// C++ exceptions in a hot loop: catcher_loop calls thrower, which throws
// through __cxa_throw and libgcc's unwinder; catcher_loop catches. Runs
// for argv[1] seconds (default: until killed).
#include <cstdlib>
#include <ctime>
#include <stdexcept>

static double now()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void thrower(int i)
{
	if (i >= 0)
		throw std::runtime_error("thrown");
}

__attribute__((noinline)) long catcher_loop(double seconds)
{
	long caught = 0;
	double end = now() + seconds;
	while (seconds <= 0 || now() < end) {
		for (int i = 0; i < 1000; i++) {
			try {
				thrower(i);
			} catch (const std::exception &) {
				caught++;
			}
		}
	}
	return caught;
}

int main(int argc, char **argv)
{
	return catcher_loop(argc > 1 ? atof(argv[1]) : 0) < 0;
}
