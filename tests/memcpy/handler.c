/* handler.c - a program with its own SIGSEGV handler under libomx_memcpy.so: faults
 * of its own (a PROT_NONE page it guards) reach its handler, exactly once each, while
 * touches of copies in flight never do; sigaction() reports its handler back to it.
 * Prints "ok" and exits 0, or says what went wrong and exits 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile sig_atomic_t own_faults;
static unsigned char *guarded;
static long page;

static void on_segv(int sig, siginfo_t *info, void *ctx)
{
	(void)sig;
	(void)ctx;
	if ((unsigned char *)info->si_addr >= guarded &&
	    (unsigned char *)info->si_addr < guarded + page) {
		own_faults++;
		mprotect(guarded, page, PROT_READ | PROT_WRITE);
		return;
	}
	_exit(3); /* a fault the program did not expect */
}

int main(void)
{
	page = sysconf(_SC_PAGESIZE);
	struct sigaction act, old;
	memset(&act, 0, sizeof(act));
	act.sa_sigaction = on_segv;
	act.sa_flags = SA_SIGINFO;
	sigemptyset(&act.sa_mask);
	if (sigaction(SIGSEGV, &act, NULL) != 0 || sigaction(SIGSEGV, NULL, &old) != 0 ||
	    old.sa_sigaction != on_segv) {
		printf("sigaction does not report the program's handler\n");
		return 1;
	}
	guarded = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t n = 16 << 20;
	unsigned char *a = malloc(n), *b = malloc(n);
	if (guarded == MAP_FAILED || !a || !b)
		return 1;
	for (int round = 0; round < 20; round++) {
		memset(a, round, n);
		memcpy(b, a, n);
		b[n / 2] ^= 1; /* a touch of the destination in flight */
		a[n / 3] = 0;  /* a write to the source in flight */
		if (b[n / 4] != (unsigned char)round || b[n / 2] != (unsigned char)(round ^ 1)) {
			printf("round %d: wrong bytes\n", round);
			return 1;
		}
		guarded[round] = 1; /* the program's own fault */
		mprotect(guarded, page, PROT_NONE);
	}
	if (own_faults != 20) {
		printf("the program's handler ran %d times, not 20\n", (int)own_faults);
		return 1;
	}
	printf("ok\n");
	return 0;
}
