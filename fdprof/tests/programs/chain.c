/* Two threads that contend on their process's file_lock through a known call chain,
 * worker -> chain_01 -> ... -> chain_10 -> leaf -> socket/close, built as distributions build
 * (-O2 -fomit-frame-pointer): the user stacks fdprof walks must carry the whole chain. Runs
 * for argv[1] seconds. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

static volatile int stop_at;

#define NI __attribute__((noinline))
NI static int leaf(void) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd >= 0) close(fd);
    return fd;
}
#define CHAIN(n, next) NI int chain_##n(int d) { int r = next(d + 1); __asm__ volatile("" ::: "memory"); return r + 1; }
NI int chain_10(int d) { int r = leaf(); __asm__ volatile("" ::: "memory"); return r + d; }
CHAIN(09, chain_10) CHAIN(08, chain_09) CHAIN(07, chain_08) CHAIN(06, chain_07)
CHAIN(05, chain_06) CHAIN(04, chain_05) CHAIN(03, chain_04) CHAIN(02, chain_03) CHAIN(01, chain_02)

NI static void *worker(void *arg) {
    time_t end = time(NULL) + stop_at;
    long n = 0;
    while (time(NULL) < end) { for (int i = 0; i < 1000; i++) n += chain_01(0); }
    return (void *)n;
}

int main(int argc, char **argv) {
    stop_at = argc > 1 ? atoi(argv[1]) : 5;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return 0;
}
