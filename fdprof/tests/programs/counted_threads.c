/* Ground truth for the per-thread counters: THREADS threads, each touching PAGES fresh pages
 * (one page fault each at least) and sleeping NAPS times (one context switch each at least).
 * With "wait", the threads are created first and the program prints "ready" and waits for a
 * line on standard input before they start (so `record -p` sees them alive at its start);
 * without, they are created and run at once (`record -- program`). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define THREADS 3
#define PAGES 2000
#define NAPS 50

static pthread_barrier_t start;

static void *work(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    long page = sysconf(_SC_PAGESIZE);
    char *mem = mmap(NULL, PAGES * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    madvise(mem, PAGES * page, MADV_NOHUGEPAGE); /* one fault a page, whatever THP says */
    for (long i = 0; i < PAGES; i++)
        mem[i * page] = 1;
    munmap(mem, PAGES * page);
    struct timespec nap = {0, 1000000};
    for (int i = 0; i < NAPS; i++)
        nanosleep(&nap, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    int wait = argc > 1 && strcmp(argv[1], "wait") == 0;
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS + 1);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, work, NULL);
    if (wait) {
        printf("ready %d %d %d\n", THREADS, PAGES, NAPS);
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            return 1;
    }
    pthread_barrier_wait(&start);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    return 0;
}
