/* ofi_shared_av.c - named (shared) AVs between two processes of one host.
 * The parent creates the AV, inserts its endpoint's name and a second one;
 * the child (forked before either touches libfabric) opens the AV by name
 * with FI_READ, finds the entries (map_addr, fi_av_lookup), sees an entry
 * the parent inserts later, cannot insert or remove, and sends to the parent
 * through the shared fi_addr. Also: a FI_READ open of a name nobody created
 * (-FI_ENOENT), FI_READ without a name and names with '/' (-FI_EINVAL), a
 * second creation of a live name (-FI_EBUSY), a name left behind by a creator
 * that died taken over, and the shared memory object gone once the creator
 * closes the AV. */
#define _GNU_SOURCE
#include "common.h"

#include <sys/wait.h>
#include <unistd.h>

#define T 20000.0

struct side {
  struct fi_info *info;
  struct fid_fabric *fab;
  struct fid_domain *dom;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
};

static void open_domain(struct side *s) {
  struct fi_info *h = t_hints(FI_MSG | FI_SHARED_AV);
  int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &s->info);
  fi_freeinfo(h);
  REQUIRE(ret == 0, "fi_getinfo with FI_SHARED_AV: %d", ret);
  CHECK(s->info->caps & FI_SHARED_AV, "FI_SHARED_AV granted");
  REQUIRE(fi_fabric(s->info->fabric_attr, &s->fab, NULL) == 0 &&
              fi_domain(s->fab, s->info, &s->dom, NULL) == 0,
          "fabric, domain");
}

static void open_ep(struct side *s) {
  struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA};
  REQUIRE(fi_cq_open(s->dom, &ca, &s->cq, NULL) == 0, "cq");
  REQUIRE(fi_endpoint(s->dom, s->info, &s->ep, NULL) == 0 &&
              fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV) == 0 &&
              fi_ep_bind(s->ep, &s->av->fid, 0) == 0 && fi_enable(s->ep) == 0,
          "endpoint");
}

static void close_side(struct side *s) {
  CHECK_RET(fi_close(&s->ep->fid), 0);
  CHECK_RET(fi_close(&s->cq->fid), 0);
  CHECK_RET(fi_close(&s->av->fid), 0);
  CHECK_RET(fi_close(&s->dom->fid), 0);
  CHECK_RET(fi_close(&s->fab->fid), 0);
  fi_freeinfo(s->info);
}

static void put_byte(int fd, char c) { REQUIRE(write(fd, &c, 1) == 1, "pipe write"); }
static char get_byte(int fd) {
  char c = 0;
  REQUIRE(read(fd, &c, 1) == 1, "pipe read");
  return c;
}

/* The child: reader of the parent's AV `name`. */
static void child(const char *name, int in, int out) {
  struct side s;
  open_domain(&s);
  get_byte(in); /* the parent has created the AV and inserted two entries */
  struct fi_av_attr aa = {.type = FI_AV_MAP, .name = name, .flags = FI_READ};
  REQUIRE(fi_av_open(s.dom, &aa, &s.av, NULL) == 0, "FI_READ open of %s", name);
  const fi_addr_t *map = aa.map_addr;
  REQUIRE(map, "map_addr");
  CHECK(map[0] == 0 && map[1] == 1, "map_addr entries %llu %llu",
        (unsigned long long)map[0], (unsigned long long)map[1]);
  char nm[16], other[16] = {1, 2, 3};
  size_t len = sizeof nm;
  CHECK_RET(fi_av_lookup(s.av, map[1], nm, &len), 0);
  CHECK(len == 16 && !memcmp(nm, other, 16), "the second entry, as inserted");
  len = sizeof nm;
  CHECK_RET(fi_av_lookup(s.av, 2, nm, &len), -FI_ENOENT); /* not yet */
  fi_addr_t a;
  CHECK_RET(fi_av_insert(s.av, other, 1, &a, 0, NULL), -FI_EACCES);
  CHECK_RET(fi_av_remove(s.av, &a, 1, 0), -FI_EACCES);
  put_byte(out, 'i'); /* ask for a third entry */
  get_byte(in);
  len = sizeof nm;
  CHECK_RET(fi_av_lookup(s.av, 2, nm, &len), 0); /* inserted after our open */
  CHECK(map[2] == 2, "map_addr[2]");
  /* Traffic through the shared address. */
  open_ep(&s);
  const char msg[] = "through a shared AV";
  struct fi_context c;
  ssize_t r;
  while ((r = fi_send(s.ep, msg, sizeof msg, NULL, map[0], &c)) == -FI_EAGAIN)
    ;
  CHECK(r == 0, "fi_send to the shared entry: %zd", r);
  struct fi_cq_data_entry e;
  double end = now_ms() + T;
  while ((r = fi_cq_read(s.cq, &e, 1)) == -FI_EAGAIN && now_ms() < end)
    ;
  CHECK(r == 1 && e.op_context == &c, "send completion: %zd", r);
  /* Die holding a second AV: its object stays behind for the parent. */
  char stale[80];
  snprintf(stale, sizeof stale, "%s.stale", name);
  struct fi_av_attr sa = {.type = FI_AV_MAP, .name = stale};
  struct fid_av *left;
  CHECK_RET(fi_av_open(s.dom, &sa, &left, NULL), 0);
  DONE();
}

int main(void) {
  char name[64];
  snprintf(name, sizeof name, "ofi_shared_av.%d", (int)getpid());
  int down[2], up[2];
  REQUIRE(pipe(down) == 0 && pipe(up) == 0, "pipes");
  pid_t pid = fork();
  REQUIRE(pid >= 0, "fork");
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    child(name, down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);

  struct side s;
  open_domain(&s);
  struct fi_av_attr bad = {.type = FI_AV_MAP, .flags = FI_READ};
  struct fid_av *av;
  CHECK_RET(fi_av_open(s.dom, &bad, &av, NULL), -FI_EINVAL);
  bad.name = "ofi_shared_av.nobody";
  CHECK_RET(fi_av_open(s.dom, &bad, &av, NULL), -FI_ENOENT);
  bad = (struct fi_av_attr){.type = FI_AV_MAP, .name = "a/b"};
  CHECK_RET(fi_av_open(s.dom, &bad, &av, NULL), -FI_EINVAL);

  struct fi_av_attr aa = {.type = FI_AV_MAP, .name = name, .count = 4};
  REQUIRE(fi_av_open(s.dom, &aa, &s.av, NULL) == 0, "create %s", name);
  struct fi_av_attr again = aa;
  CHECK_RET(fi_av_open(s.dom, &again, &av, NULL), -FI_EBUSY); /* its creator lives */
  open_ep(&s);
  char me[16], other[16] = {1, 2, 3}, third[16] = {4, 5, 6};
  size_t len = sizeof me;
  REQUIRE(fi_getname(&s.ep->fid, me, &len) == 0, "getname");
  fi_addr_t a[3];
  CHECK_RET(fi_av_insert(s.av, me, 1, &a[0], 0, NULL), 1);
  CHECK_RET(fi_av_insert(s.av, other, 1, &a[1], 0, NULL), 1);
  CHECK(a[0] == 0 && a[1] == 1, "creator's fi_addrs");
  char buf[64] = {0};
  struct fi_context rc;
  CHECK_RET(fi_recv(s.ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, &rc), 0);
  put_byte(down[1], 'r');
  CHECK(get_byte(up[0]) == 'i', "child asks for a third entry");
  CHECK_RET(fi_av_insert(s.av, third, 1, &a[2], 0, NULL), 1);
  put_byte(down[1], 'r');

  struct fi_cq_data_entry e;
  double end = now_ms() + T;
  ssize_t r;
  while ((r = fi_cq_read(s.cq, &e, 1)) == -FI_EAGAIN && now_ms() < end)
    ;
  CHECK(r == 1 && e.op_context == &rc && !strcmp(buf, "through a shared AV"),
        "message from the child: %zd '%s'", r, buf);
  int status = -1;
  REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %d", status);
  /* The child died holding NAME.stale: its name can be created again. */
  char stale[80], stale_path[128];
  snprintf(stale, sizeof stale, "%s.stale", name);
  snprintf(stale_path, sizeof stale_path, "/dev/shm/omx-fi-av-%s", stale);
  CHECK(access(stale_path, F_OK) == 0, "the dead creator's object is there");
  struct fi_av_attr sa = {.type = FI_AV_MAP, .name = stale};
  struct fid_av *taken;
  CHECK_RET(fi_av_open(s.dom, &sa, &taken, NULL), 0);
  CHECK_RET(fi_close(&taken->fid), 0);
  CHECK(access(stale_path, F_OK) != 0, "taken over, then removed at close");
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/omx-fi-av-%s", name);
  CHECK(access(path, F_OK) == 0, "shared object while the AV is open");
  close_side(&s);
  CHECK(access(path, F_OK) != 0, "shared object removed at close");
  DONE();
}
