/* ofi_threads.c - FI_THREAD_SAFE: two sender threads post on one endpoint
 * while two receiver threads post on another and read its CQ at the same
 * time (one with fi_cq_read, one blocking in fi_cq_sread); every message is
 * checked, whichever thread reads its completion. */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>

enum { N = 400, MAXLEN = 3000 };

static struct tctx t;
static atomic_int sends_done, recvs_done, bad;

struct rx {
  int tid, i;
  struct fi_context ctx; /* first: the completion's op_context */
  char buf[MAXLEN];
};
static struct rx rxs[2][N];
static char txbuf[2][N][MAXLEN];
static struct fi_context txctx[2][N];

static size_t len_of(int tid, int i) { return (size_t)((i * 37 + tid * 11) % MAXLEN); }

static void check_rx(struct fi_cq_tagged_entry *e) {
  struct rx *r = NULL;
  for (int k = 0; k < 2 && !r; k++)
    if ((char *)e->op_context >= (char *)rxs[k] &&
        (char *)e->op_context < (char *)(rxs[k] + N))
      r = (struct rx *)((char *)e->op_context - offsetof(struct rx, ctx));
  if (!r || e->len != len_of(r->tid, r->i) || e->tag != (uint64_t)r->tid ||
      verify(r->buf, e->len, (uint32_t)(r->tid << 16 | r->i)) >= 0) {
    fprintf(stderr, "bad receive completion (%p, len %zu, tag %llu)\n",
            e->op_context, e->len, (unsigned long long)e->tag);
    atomic_fetch_add(&bad, 1);
  }
  atomic_fetch_add(&recvs_done, 1);
}

static void *sender(void *arg) {
  int tid = (int)(intptr_t)arg;
  for (int i = 0; i < N; i++) {
    size_t l = len_of(tid, i);
    fill(txbuf[tid][i], l, (uint32_t)(tid << 16 | i));
    ssize_t r;
    while ((r = fi_tsend(t.ep[0], txbuf[tid][i], l, NULL, t.addr[1], (uint64_t)tid,
                         &txctx[tid][i])) == -FI_EAGAIN)
      ;
    if (r)
      atomic_fetch_add(&bad, 1);
    struct fi_cq_tagged_entry e;
    if (fi_cq_read(t.cq[0], &e, 1) == 1)
      atomic_fetch_add(&sends_done, 1);
  }
  double end = now_ms() + 30000;
  while (atomic_load(&sends_done) < 2 * N && now_ms() < end) {
    struct fi_cq_tagged_entry e;
    if (fi_cq_read(t.cq[0], &e, 1) == 1)
      atomic_fetch_add(&sends_done, 1);
  }
  return NULL;
}

static void *receiver(void *arg) {
  int tid = (int)(intptr_t)arg;
  for (int i = 0; i < N; i++) {
    struct rx *r = &rxs[tid][i];
    r->tid = tid;
    r->i = i;
    if (fi_trecv(t.ep[1], r->buf, MAXLEN, NULL, FI_ADDR_UNSPEC, (uint64_t)tid, 0,
                 &r->ctx))
      atomic_fetch_add(&bad, 1);
    struct fi_cq_tagged_entry e;
    if (fi_cq_read(t.cq[1], &e, 1) == 1)
      check_rx(&e);
  }
  double end = now_ms() + 30000;
  while (atomic_load(&recvs_done) < 2 * N && now_ms() < end) {
    struct fi_cq_tagged_entry e;
    ssize_t n = tid ? fi_cq_sread(t.cq[1], &e, 1, NULL, 20) : fi_cq_read(t.cq[1], &e, 1);
    if (n == 1)
      check_rx(&e);
  }
  return NULL;
}

int main(void) {
  struct fi_info *h = t_hints(FI_TAGGED);
  h->domain_attr->threading = FI_THREAD_SAFE;
  struct fi_info *info = NULL;
  CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info), 0);
  CHECK(info && info->domain_attr->threading == FI_THREAD_SAFE, "thread safe");
  fi_freeinfo(h);
  fi_freeinfo(info);
  t_setup(&t, 2, FI_TAGGED, FI_AV_TABLE, FI_CQ_FORMAT_TAGGED, 0);
  pthread_t th[4];
  for (int i = 0; i < 2; i++) {
    pthread_create(&th[i], NULL, receiver, (void *)(intptr_t)i);
    pthread_create(&th[2 + i], NULL, sender, (void *)(intptr_t)i);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  CHECK(atomic_load(&bad) == 0, "%d bad operations", atomic_load(&bad));
  CHECK(atomic_load(&sends_done) == 2 * N, "send completions %d", atomic_load(&sends_done));
  CHECK(atomic_load(&recvs_done) == 2 * N, "receive completions %d", atomic_load(&recvs_done));
  t_teardown(&t);
  DONE();
}
