/* memcpy_preload.c - what a program sees of a memcpy followed by computation:
 * the time memcpy takes (visible) and until the computation and a first touch of the
 * destination are done (total), best of REPS, for sizes 64 KiB..64 MiB. Run it with
 * and without libomx_memcpy.so (bench/memcpy_preload.sh). Prints "size visible total" (us). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Computation on other memory, about as long as copying n bytes at 10 GB/s. */
static volatile uint64_t sink;
static void compute(size_t n)
{
	uint64_t x = 1;
	for (size_t i = 0; i < n / 8; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 5;
	for (size_t n = 64 << 10; n <= (64u << 20); n *= 4) {
		unsigned char *a = malloc(n), *b = malloc(n);
		memset(a, 1, n);
		memset(b, 2, n);
		double best_v = 1e30, best_t = 1e30;
		for (int r = 0; r < reps; r++) {
			a[r] = (unsigned char)r;
			double t0 = now_us();
			memcpy(b, a, n);
			double t1 = now_us();
			compute(n);
			sink += b[n / 2]; /* the first touch waits for the copy */
			double t2 = now_us();
			if (t1 - t0 < best_v) best_v = t1 - t0;
			if (t2 - t0 < best_t) best_t = t2 - t0;
		}
		printf("%zu %.1f %.1f\n", n, best_v, best_t);
		free(a);
		free(b);
	}
	return 0;
}
