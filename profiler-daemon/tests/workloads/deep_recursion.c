/* A thread (not the main one) recursing 300 levels deep in frames of about
 * 224 bytes (67 KiB of stack, more than a 16 KiB copy holds), spinning in
 * recursion_leaf at the bottom. Runs until killed. */
#include <pthread.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline, noclone)) void recursion_leaf(void)
{
	for (;;)
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

static void *deep_thread(void *arg)
{
	(void)arg;
	descend(300);
	return NULL;
}

int main(void)
{
	pthread_t thread;
	if (pthread_create(&thread, NULL, deep_thread, NULL) != 0)
		return 1;
	pthread_join(thread, NULL);
	return 0;
}
