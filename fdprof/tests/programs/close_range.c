/* Ground truth for close_range: after closing with close(2) whatever it inherited at 100 and
 * above, 100 rounds of dup2(0, 100..109), close_range(100, 109, CLOSE_RANGE_CLOEXEC), which
 * closes nothing, and close_range(100, ~0U, 0), which closes the 10. Expected: dup2 1000 calls,
 * close_range 200 calls, 1000 fds closed by close_range. */
#include <unistd.h>
#include <sys/syscall.h>

#define CLOSE_RANGE_CLOEXEC (1U << 2)

int main(void)
{
	for (long fd = 100; fd < sysconf(_SC_OPEN_MAX); fd++)
		close(fd);
	for (int round = 0; round < 100; round++) {
		for (int fd = 100; fd < 110; fd++)
			if (dup2(0, fd) != fd)
				return 1;
		if (syscall(SYS_close_range, 100, 109, CLOSE_RANGE_CLOEXEC) != 0)
			return 2;
		if (syscall(SYS_close_range, 100, ~0U, 0) != 0)
			return 3;
	}
	return 0;
}
