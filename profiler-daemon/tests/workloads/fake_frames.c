/* A stack no unwinder can make sense of, on purpose: spin_on_fake_frames
 * points the frame pointer at a made-up chain whose first return address
 * is in the program's data (not code) and whose second points at nothing
 * mapped, then spins. A frame-pointer walk of its samples therefore gives
 * spin_on_fake_frames, a data address and an unmapped one: what a walk
 * through code without frame pointers produces by accident. Runs until
 * killed. */
#include <stdint.h>

static unsigned long data_words[64];
/* Each frame: the caller's frame pointer, then the return address. */
static uintptr_t outer_frame[2];
static uintptr_t inner_frame[2];

__attribute__((noinline, noclone)) void spin_on_fake_frames(void)
{
	outer_frame[0] = 0;
	outer_frame[1] = 0x10000; /* below every mapping */
	inner_frame[0] = (uintptr_t)outer_frame;
	inner_frame[1] = (uintptr_t)&data_words[32];
	__asm__ volatile("mov %0, %%rbp\n"
			 "1: jmp 1b\n"
			 :
			 : "r"(inner_frame)
			 : "memory");
}

int main(void)
{
	spin_on_fake_frames();
	return 0;
}
