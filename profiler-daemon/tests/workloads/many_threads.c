/* Thread workload: argv[1] threads (bounded to 4000), all but argv[2] of
 * them asleep; the others spin in spin_thread. The threads run on small
 * stacks. Prints "ready" once every thread is started, then runs until
 * killed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline, noclone)) void spin_thread(void)
{
	for (;;)
		for (unsigned long i = 0; i < 1000000; i++)
			sink += i;
}

__attribute__((noinline, noclone)) void sleep_thread(void)
{
	for (;;)
		pause();
}

static void *spinner(void *unused) { (void)unused; spin_thread(); return NULL; }
static void *sleeper(void *unused) { (void)unused; sleep_thread(); return NULL; }

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 100;
	int spinning = argc > 2 ? atoi(argv[2]) : 2;
	if (threads < 1 || threads > 4000 || spinning < 0 || spinning > threads)
		return 2;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (int i = 0; i < threads; i++) {
		pthread_t thread;
		if (pthread_create(&thread, &attr, i < spinning ? spinner : sleeper, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
