/* A workload that spends most of its time in the kernel: main -> read_zeros
 * reads /dev/zero in 1 MiB chunks, so the kernel clears user memory on its
 * behalf. Runs until killed.
 *
 * The system call is made inline rather than through libc's read(): Debian's
 * libc is built without frame pointers, and a frame-pointer walk starting in
 * one of its functions skips that function's caller (read_zeros here). */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>

static char buffer[1 << 20];

static inline long raw_read(int fd, void *buf, unsigned long count)
{
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_read), "D"((long)fd), "S"(buf), "d"(count)
			 : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline, noclone)) void read_zeros(int fd)
{
	for (;;)
		if (raw_read(fd, buffer, sizeof buffer) < 0)
			exit(1);
}

int main(void)
{
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		return 1;
	read_zeros(fd);
	return 0;
}
