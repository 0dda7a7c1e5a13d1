/* pairs.c - time N malloc(64)+free pairs.
 *
 * Usage: pairs [--wait] N
 *   --wait  block until a line (or EOF) arrives on stdin before starting the
 *           timed loop, so a tracer can attach by pid first.
 * Prints exactly one line on stdout: ns_per_pair=<float>
 * Build: cc -O1 -o pairs pairs.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;

int main(int argc, char **argv)
{
    int wait = 0;
    long n = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--wait") == 0) {
            wait = 1;
        } else {
            char *end;
            n = strtol(argv[i], &end, 10);
            if (*end != '\0' || n <= 0) {
                fprintf(stderr, "pairs: bad N '%s'\n", argv[i]);
                return 2;
            }
        }
    }
    if (n <= 0) {
        fprintf(stderr, "usage: pairs [--wait] N\n");
        return 2;
    }
    if (wait) {
        fprintf(stderr, "pairs: waiting for a line on stdin\n");
        char buf[64];
        (void)fgets(buf, sizeof buf, stdin); /* EOF also starts the run */
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        void *p = malloc(64);
        __asm__ volatile("" : : "r"(p) : "memory");
        sink += (unsigned long)p & 1;
        free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);

    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("ns_per_pair=%.3f\n", ns / (double)n);
    fflush(stdout);
    return 0;
}
