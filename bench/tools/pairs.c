/* pairs.c - time N malloc(64)+free pairs.
 *
 * Usage: pairs [--wait] [--depth D] N
 *   --wait     block until a line (or EOF) arrives on stdin before starting the
 *              timed loop, so a tracer can attach by pid first.
 *   --depth D  run the loop D calls deep (frames of ~240 bytes), so each
 *              allocation has a deep stack, as one inside a server's async
 *              task does; build with frame pointers for a tracer to walk it.
 * Prints exactly one line on stdout: ns_per_pair=<float>
 * Build: cc -O1 -o pairs pairs.c
 *        cc -O1 -fno-omit-frame-pointer -fno-optimize-sibling-calls -o pairs-fp pairs.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;

/* The timed loop. */
/* Inlined where it is used: the shallow runs time it in main, as always. */
__attribute__((always_inline)) static inline double time_pairs(long n)
{
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
    return ns / (double)n;
}

/* time_pairs, `depth` frames further down the stack. */
__attribute__((noinline)) static double deeper(int depth, long n)
{
    volatile char frame[224];
    frame[0] = (char)depth;
    double ns = depth > 0 ? deeper(depth - 1, n) : time_pairs(n);
    sink += frame[0];
    return ns;
}

int main(int argc, char **argv)
{
    int wait = 0;
    int depth = 0;
    long n = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--wait") == 0) {
            wait = 1;
        } else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc) {
            depth = atoi(argv[++i]);
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
        fprintf(stderr, "usage: pairs [--wait] [--depth D] N\n");
        return 2;
    }
    if (wait) {
        fprintf(stderr, "pairs: waiting for a line on stdin\n");
        char buf[64];
        (void)fgets(buf, sizeof buf, stdin); /* EOF also starts the run */
    }

    double ns = depth > 0 ? deeper(depth, n) : time_pairs(n);
    printf("ns_per_pair=%.3f\n", ns);
    fflush(stdout);
    return 0;
}
