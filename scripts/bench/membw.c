// Read bandwidth: sums a 1 GiB buffer (far larger than any cache) with 1..N threads and
// prints the best of 5 passes in GB/s. Build and run:
//   gcc -O3 -march=native -fopenmp scripts/bench/membw.c -o /tmp/membw && /tmp/membw 2
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int maxt = argc > 1 ? atoi(argv[1]) : 2;
    size_t n = (size_t)1 << 27; // 2^27 u64 = 1 GiB; integer sum so it vectorizes
    unsigned long long *a = aligned_alloc(64, n * sizeof(*a));
    for (size_t i = 0; i < n; i++) a[i] = i & 1023;
    for (int t = 1; t <= maxt; t++) {
        double best = 0, sink = 0;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = omp_get_wtime();
            unsigned long long s = 0;
#pragma omp parallel for num_threads(t) reduction(+ : s) schedule(static)
            for (size_t i = 0; i < n; i++) s += a[i];
            double dt = omp_get_wtime() - t0;
            sink += (double)s;
            double gbs = n * sizeof(*a) / dt / 1e9;
            if (gbs > best) best = gbs;
        }
        printf("threads=%d read_GBps=%.2f (checksum %.0f)\n", t, best, sink);
    }
    return 0;
}
