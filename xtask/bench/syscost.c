/* What one syscall costs, in ns: getppid (no fd) and dup+close (two fd syscalls), timed in a
 * tight loop after a pause that lets a profiler finish attaching. Prints one JSON line.
 * `syscost held`: the dup+close loop alone, once a line is read from stdin (the profiler is
 * attached by then), and an exit at the next line, so the profiler's programs are read while
 * they are still loaded. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	const int n = 1000000;
	double a, b, c;
	char line[16];
	if (argc > 1 && strcmp(argv[1], "held") == 0) {
		if (!fgets(line, sizeof line, stdin))
			return 1;
		b = now();
		for (int i = 0; i < n; i++)
			close(dup(0));
		c = now();
		printf("{\"fd_syscall_ns\":%.1f}\n", (c - b) / n / 2 * 1e9);
		fflush(stdout);
		return fgets(line, sizeof line, stdin) ? 0 : 1;
	}
	usleep(400000);
	a = now();
	for (int i = 0; i < n; i++)
		syscall(SYS_getppid);
	b = now();
	for (int i = 0; i < n; i++)
		close(dup(0));
	c = now();
	printf("{\"getppid_ns\":%.1f,\"fd_syscall_ns\":%.1f}\n", (b - a) / n * 1e9,
	       (c - b) / n / 2 * 1e9);
	return 0;
}
