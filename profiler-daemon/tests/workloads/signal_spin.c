/* Busy work inside a signal handler: main -> outer -> interrupted_work
 * spins, and a SIGALRM every 2 ms runs on_alarm -> spin_in_handler for
 * about a millisecond on the same stack. A stack of the handler is whole
 * only if the unwinder steps through the signal frame into the interrupted
 * code. Runs until killed. */
#include <signal.h>
#include <sys/time.h>

static volatile unsigned long counter;

__attribute__((noinline, noclone)) void spin_in_handler(void)
{
	for (unsigned long i = 0; i < 1000000; i++)
		counter += i;
}

__attribute__((noinline, noclone)) void on_alarm(int signal)
{
	(void)signal;
	spin_in_handler();
	counter++;
}

__attribute__((noinline, noclone)) void interrupted_work(void)
{
	while (counter != 1)
		counter += 2;
}

__attribute__((noinline, noclone)) void outer(void)
{
	interrupted_work();
	counter++;
}

int main(void)
{
	struct sigaction action = { 0 };
	action.sa_handler = on_alarm;
	sigaction(SIGALRM, &action, 0);
	struct itimerval every = { { 0, 2000 }, { 0, 2000 } };
	setitimer(ITIMER_REAL, &every, 0);
	outer();
	return (int)counter;
}
