/* A program that fills a small map of sampled blocks, then resizes one
 * unsampled block a million times: what each realloc costs the probe's
 * programs once the map has been full (every realloc is sent then).
 *
 *   gcc -O2 bench/tools/reallocs.c -o reallocs
 *   ./reallocs & leakscope-probe attach --pid $! --sample 4KiB \
 *       --sampled-blocks 1000 --bpf-stats --out /tmp/r.lsrec
 *
 * (`--sampled-blocks` is hidden, for tests: 200,000 blocks of 64 bytes kept
 * are ~3,000 sampled at 4 KiB.) The pointers go through volatile storage so
 * that gcc keeps every call. */
#include <stdlib.h>
#include <unistd.h>

void *volatile keep[200000];
void *volatile sink;

int main(void) {
    sleep(2); /* time to attach */
    for (int i = 0; i < 200000; i++) keep[i] = malloc(64);
    sleep(1);
    void *p = malloc(24);
    for (int i = 0; i < 1000000; i++) {
        p = realloc(p, (i & 1) ? 40 : 24);
        sink = p;
    }
    free(p);
    for (int i = 0; i < 200000; i++) free(keep[i]);
    return 0;
}
