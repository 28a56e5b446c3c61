/* A process whose main thread leaves first: main blocks SIGUSR1, starts a worker and calls
 * pthread_exit, so /proc/PID/stat shows the main thread as a zombie while the process lives on.
 * The worker waits for SIGUSR1 (the test sends it once the recorder is attached; without it
 * for 30 s, the program gives up with status 5), sleeps 300 ms
 * (so a recorder that gave up early has surely gone), then makes DUPS dup/close pairs and exits,
 * ending the process. Expected: dup DUPS calls, close DUPS calls, nothing else traced. */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#define DUPS 500

static void *worker(void *arg)
{
	sigset_t *set = arg;
	struct timespec wait = {30, 0};
	struct timespec pause = {0, 300 * 1000 * 1000};

	if (sigtimedwait(set, NULL, &wait) != SIGUSR1)
		_exit(5);
	nanosleep(&pause, NULL);
	for (int i = 0; i < DUPS; i++) {
		int fd = dup(0);
		if (fd < 0 || close(fd) != 0)
			_exit(2);
	}
	return NULL;
}

int main(void)
{
	static sigset_t set;
	pthread_t thread;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
		return 3;
	if (pthread_create(&thread, NULL, worker, &set) != 0)
		return 4;
	pthread_exit(NULL);
}
