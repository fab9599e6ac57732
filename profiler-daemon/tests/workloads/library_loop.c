/* A hot loop in a shared library, for annotate's disassembly. Built with
 * -DLIBRARY -shared -fPIC, it is the library: library_hot spins. Built
 * without, it is the program: it loads the library named by argv[1] with
 * dlopen and calls library_hot until killed. The tests link the library
 * with its code at a virtual address far from its file offset
 * (-Wl,-Ttext-segment), so that a frame's offset in the file is not the
 * address objdump shows. */
#ifdef LIBRARY

__attribute__((noinline, noclone)) void library_hot(void)
{
	volatile unsigned long sink = 0;
	for (unsigned long i = 0; i < 10000000UL; i++)
		sink += i * i;
}

#else

#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *library = dlopen(argc > 1 ? argv[1] : "", RTLD_NOW);
	void (*hot)(void) = library ? (void (*)(void))dlsym(library, "library_hot") : NULL;
	if (!hot) {
		fprintf(stderr, "cannot load library_hot: %s\n", dlerror());
		return 1;
	}
	for (;;)
		hot();
}

#endif
