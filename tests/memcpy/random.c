/* random.c - a seeded random program of copies for libomx_memcpy.so: copies between
 * buffers and from one shared source, overlapping moves, byte writes and reads of
 * sources and destinations at random times, realloc, write()/read() of the buffers
 * through a file, from several threads, then a fork. Its output depends only on the
 * seed: tests/memcpy/run.sh compares it with and without the preload.
 *
 *   random SEED THREADS OPS DIR */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NBUF 5
#define MAXLEN (3 << 20)

static uint64_t seed;
static int ops;
static const char *dir;
static unsigned char *shared;
static size_t shared_len = 4 << 20;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint64_t hash(const unsigned char *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static void fill(unsigned char *p, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = next(s);
		for (size_t k = 0; k < 8 && i + k < n; k++)
			p[i + k] = (unsigned char)(v >> (8 * k));
	}
}

struct result {
	uint64_t hash;
	long errors;
};

static void *worker(void *arg)
{
	struct result *r = arg;
	long t = r->errors;
	uint64_t s = seed * 1000003 + (uint64_t)t + 1, h = 14695981039346656037ull;
	unsigned char *buf[NBUF];
	size_t len[NBUF];
	char path[512];
	snprintf(path, sizeof(path), "%s/random-%ld", dir, t);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	r->errors = fd < 0;
	for (int i = 0; i < NBUF; i++) {
		len[i] = 64 * 1024 + next(&s) % MAXLEN;
		buf[i] = malloc(len[i]);
		fill(buf[i], len[i], &s);
	}
	for (int op = 0; op < ops; op++) {
		int i = next(&s) % NBUF, j = (i + 1 + next(&s) % (NBUF - 1)) % NBUF;
		size_t a, b, n;
		switch (next(&s) % 11) {
		case 0: case 1: case 2: /* a copy between two buffers */
			n = next(&s) % (len[i] < len[j] ? len[i] : len[j]);
			a = next(&s) % (len[i] - n + 1);
			b = next(&s) % (len[j] - n + 1);
			memcpy(buf[i] + a, buf[j] + b, n);
			break;
		case 3: /* from the source every thread copies from */
			n = next(&s) % (len[i] < shared_len ? len[i] : shared_len);
			a = next(&s) % (len[i] - n + 1);
			b = next(&s) % (shared_len - n + 1);
			memcpy(buf[i] + a, shared + b, n);
			h = hash(shared + b, 64, h);
			break;
		case 4: /* an overlapping move */
			n = next(&s) % len[i];
			a = next(&s) % (len[i] - n + 1);
			b = next(&s) % (len[i] - n + 1);
			memmove(buf[i] + a, buf[i] + b, n);
			break;
		case 5: case 6: /* writes to a source or destination */
			for (int k = 0; k < 4; k++)
				buf[i][next(&s) % len[i]] ^= (unsigned char)next(&s);
			break;
		case 7: case 8: /* reads */
			a = next(&s) % len[i];
			n = next(&s) % (len[i] - a);
			h = hash(buf[i] + a, n < 4096 ? n : 4096, h);
			h = hash(buf[i] + a + n, len[i] - a - n < 64 ? len[i] - a - n : 64, h);
			break;
		case 9: { /* realloc: the block may move or be unmapped */
			size_t nl = 64 * 1024 + next(&s) % MAXLEN;
			unsigned char *p = realloc(buf[i], nl);
			if (!p) { r->errors++; break; }
			if (nl > len[i])
				fill(p + len[i], nl - len[i], &s);
			buf[i] = p;
			len[i] = nl;
			break;
		}
		default: /* the kernel reads one buffer and writes another */
			n = next(&s) % (len[i] < len[j] ? len[i] : len[j]);
			a = next(&s) % (len[i] - n + 1);
			b = next(&s) % (len[j] - n + 1);
			if (pwrite(fd, buf[i] + a, n, 0) != (ssize_t)n) r->errors++;
			if (pread(fd, buf[j] + b, n, 0) != (ssize_t)n) r->errors++;
			break;
		}
	}
	for (int i = 0; i < NBUF; i++) {
		h = hash(buf[i], len[i], h);
		free(buf[i]);
	}
	close(fd);
	unlink(path);
	r->hash = h;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: random SEED THREADS OPS DIR\n");
		return 2;
	}
	seed = strtoull(argv[1], NULL, 0);
	int threads = atoi(argv[2]);
	ops = atoi(argv[3]);
	dir = argv[4];
	if (threads < 1 || threads > 64 || ops < 0)
		return 2;
	uint64_t s = seed | 1;
	shared = malloc(shared_len);
	fill(shared, shared_len, &s);
	pthread_t tid[64];
	struct result res[64];
	for (long t = 0; t < threads; t++) {
		res[t].errors = t;
		pthread_create(&tid[t], NULL, worker, &res[t]);
	}
	int bad = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(tid[t], NULL);
		printf("thread %d: %016llx, %ld errors\n", t, (unsigned long long)res[t].hash,
		       res[t].errors);
		bad |= res[t].errors != 0;
	}
	/* A copy in flight when the program forks: the child sees it done. */
	unsigned char *copy = malloc(shared_len);
	memcpy(copy, shared, shared_len);
	int p[2];
	if (pipe(p) != 0)
		return 1;
	pid_t child = fork();
	if (child == 0) {
		unsigned char *again = malloc(shared_len);
		memcpy(again, copy, shared_len);
		uint64_t hc = hash(again, shared_len, 0);
		_exit(write(p[1], &hc, sizeof(hc)) == sizeof(hc) ? 0 : 1);
	}
	uint64_t hc = 0;
	int st = 0;
	if (read(p[0], &hc, sizeof(hc)) != sizeof(hc) || waitpid(child, &st, 0) != child || st != 0)
		bad = 1;
	printf("fork: child %016llx, parent %016llx\n", (unsigned long long)hc,
	       (unsigned long long)hash(copy, shared_len, 0));
	return bad;
}
