/* Spins on one CPU in one known function, spin_here, for argv[1] seconds, and makes no system
 * call meanwhile (the clock is read through the vDSO, once every 2^20 iterations): a sampling
 * profiler should find nearly every sample of it in spin_here. */
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin_here(double seconds)
{
	volatile unsigned long n = 0;
	double end = now() + seconds;
	for (;;) {
		n++;
		if ((n & ((1ul << 20) - 1)) == 0 && now() >= end)
			return;
	}
}

int main(int argc, char **argv)
{
	spin_here(argc > 1 ? atof(argv[1]) : 3.0);
	return 0;
}
