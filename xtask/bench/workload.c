/*
 * C baseline for `cargo xtask bench workload`: the same ops as `fdprof workload`, the same
 * raw system calls, the same loop shape (per-thread padded counters, stop flag read every 256
 * ops), so the ratio of the two rates measures fdprof's own overhead.
 *
 * usage: workload SCENARIO [-t THREADS] [-n FDS] [-d SECONDS] [-k HOLE]
 * prints: ops_per_sec=<rate>
 *
 * SCENARIO: socket-close open-close dup-close pipe socketpair opensock holes dup2-worst
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCH 256
#define MAX_THREADS 256

enum scenario { SOCKET_CLOSE, OPEN_CLOSE, DUP_CLOSE, PIPE, SOCKETPAIR, OPENSOCK, HOLES, DUP2_WORST };

struct task {
	_Alignas(128) _Atomic uint64_t ops;
	pthread_t thread;
	int index;
	int *slots;
	unsigned nslots;
	uint64_t rng;
	struct timespec start, end;
};

static enum scenario scenario;
static int nthreads = 1, hole = 3, dup_src = -1;
static unsigned nfds;
static double seconds = 1.0;
static atomic_bool stop_flag;
static pthread_barrier_t go;
static struct task tasks[MAX_THREADS];

static void die(const char *what)
{
	fprintf(stderr, "workload.c: %s: %s\n", what, strerror(errno));
	exit(1);
}

static long chk(long r, const char *what)
{
	if (r < 0)
		die(what);
	return r;
}

#define SOCKET() chk(syscall(SYS_socket, AF_INET, SOCK_STREAM, 0), "socket")
#define CLOSE(fd) chk(syscall(SYS_close, (fd)), "close")
#define OPEN() chk(syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY, 0), "openat")
#define DUP(fd) chk(syscall(SYS_dup, (fd)), "dup")

/* splitmix64 of the task number, then xorshift64 (13, 7, 17): fdprof's sequence. */
static uint64_t seed_for(unsigned task)
{
	uint64_t z = (uint64_t)(task + 1) * 0x9E3779B97F4A7C15ULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return (z ^ (z >> 31)) | 1;
}

static inline unsigned below(uint64_t *state, unsigned n)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return (unsigned)(((x >> 32) * (uint64_t)n) >> 32);
}

static inline void op(struct task *t)
{
	int fds[2];
	long fd, far;

	switch (scenario) {
	case SOCKET_CLOSE:
		fd = SOCKET();
		CLOSE(fd);
		break;
	case OPEN_CLOSE:
		fd = OPEN();
		CLOSE(fd);
		break;
	case DUP_CLOSE:
		fd = DUP(dup_src);
		CLOSE(fd);
		break;
	case PIPE:
		chk(syscall(SYS_pipe2, fds, 0), "pipe2");
		CLOSE(fds[0]);
		CLOSE(fds[1]);
		break;
	case SOCKETPAIR:
		chk(syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, fds), "socketpair");
		CLOSE(fds[0]);
		CLOSE(fds[1]);
		break;
	case OPENSOCK: {
		unsigned i = below(&t->rng, t->nslots);
		CLOSE(t->slots[i]);
		t->slots[i] = SOCKET();
		break;
	}
	case HOLES:
		CLOSE(hole);
		OPEN();
		far = OPEN();
		CLOSE(far);
		break;
	case DUP2_WORST:
		CLOSE(hole);
		chk(syscall(SYS_dup2, 0, hole), "dup2");
		fd = DUP(0);
		CLOSE(fd);
		break;
	}
}

static void *worker(void *arg)
{
	struct task *t = arg;
	uint64_t done = 0;

	pthread_barrier_wait(&go);
	clock_gettime(CLOCK_MONOTONIC, &t->start);
	for (;;) {
		for (int i = 0; i < BATCH; i++)
			op(t);
		done += BATCH;
		atomic_store_explicit(&t->ops, done, memory_order_relaxed);
		if (atomic_load_explicit(&stop_flag, memory_order_relaxed))
			break;
	}
	clock_gettime(CLOCK_MONOTONIC, &t->end);
	return NULL;
}

static double secs(struct timespec ts)
{
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void hold_extra(unsigned n)
{
	if (n == 0)
		return;
	int first = OPEN();
	for (unsigned i = 1; i < n; i++)
		DUP(first);
	if (dup_src < 0)
		dup_src = first;
}

static void fill_below(unsigned n)
{
	int src = OPEN();
	if ((unsigned)src >= n) {
		CLOSE(src);
		return;
	}
	for (unsigned fd = 0; fd < n; fd++)
		if (fcntl(fd, F_GETFD) == -1)
			chk(syscall(SYS_dup2, src, fd), "dup2");
}

int main(int argc, char **argv)
{
	static const char *names[] = { "socket-close", "open-close", "dup-close", "pipe",
				       "socketpair", "opensock", "holes", "dup2-worst" };
	int opt, found = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: workload SCENARIO [-t THREADS] [-n FDS] [-d SECONDS] [-k HOLE]\n");
		return 2;
	}
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(argv[1], names[i]) == 0) {
			scenario = i;
			found = 1;
		}
	if (!found) {
		fprintf(stderr, "workload.c: unknown scenario %s\n", argv[1]);
		return 2;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "t:n:d:k:")) != -1) {
		switch (opt) {
		case 't': nthreads = atoi(optarg); break;
		case 'n': nfds = (unsigned)atoi(optarg); break;
		case 'd': seconds = atof(optarg); break;
		case 'k': hole = atoi(optarg); break;
		default: return 2;
		}
	}
	if (nthreads < 1 || nthreads > MAX_THREADS)
		return 2;

	switch (scenario) {
	case OPENSOCK:
		for (int i = 0; i < nthreads; i++) {
			struct task *t = &tasks[i];
			t->nslots = nfds / nthreads + ((unsigned)i < nfds % nthreads);
			t->slots = malloc(t->nslots * sizeof(int));
			t->slots[0] = SOCKET();
			for (unsigned j = 1; j < t->nslots; j++)
				t->slots[j] = DUP(t->slots[0]);
			t->rng = seed_for(i);
		}
		break;
	case HOLES:
	case DUP2_WORST:
		fill_below(nfds);
		break;
	default:
		hold_extra(nfds);
		if (scenario == DUP_CLOSE && dup_src < 0)
			dup_src = OPEN();
	}

	pthread_barrier_init(&go, NULL, nthreads + 1);
	for (int i = 0; i < nthreads; i++) {
		tasks[i].index = i;
		if (pthread_create(&tasks[i].thread, NULL, worker, &tasks[i]))
			die("pthread_create");
	}
	pthread_barrier_wait(&go);
	struct timespec nap = { (time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9) };
	nanosleep(&nap, NULL);
	atomic_store(&stop_flag, 1);

	double first = 1e300, last = 0;
	uint64_t total = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(tasks[i].thread, NULL);
		total += atomic_load(&tasks[i].ops);
		if (secs(tasks[i].start) < first)
			first = secs(tasks[i].start);
		if (secs(tasks[i].end) > last)
			last = secs(tasks[i].end);
	}
	printf("ops_per_sec=%.1f\n", total / (last - first));
	return 0;
}
