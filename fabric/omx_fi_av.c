/* omx_fi_av.c - address vectors. An fi_addr_t is the index of the entry
 * (FI_AV_TABLE and FI_AV_MAP alike); entries hold the peer's name (nic id,
 * endpoint index, key). Endpoints connect to a peer lazily, on their first
 * send to it, and keep the MX address per index.
 *
 * A named AV (fi_av_attr.name) is shared between the processes of a host:
 * its creator keeps the entries in a POSIX shared memory object
 * "/omx-fi-av-NAME" (header, entries, and the fi_addr_t array handed out as
 * map_addr), and publishes each insert by raising the header's count last;
 * processes that open it with FI_READ map it read-only and see every entry
 * inserted so far. The creator unlinks it at close; a name whose creator is
 * still running cannot be created again (-FI_EBUSY). */
#include "omx_fi.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define OFX_AV_SHM_MAGIC 0x4d48535641786d6fULL /* "omxAVSHM" */
#define OFX_AV_SHM_MIN 1024                    /* entries, at least */

struct ofx_av_shm {
  uint64_t magic;
  uint64_t cap;
  uint64_t n; /* published entries: written last (release), read acquire */
  uint64_t creator; /* its pid: a name is free again once it is gone */
  /* struct ofx_av_entry tab[cap]; fi_addr_t map[cap]; */
};

size_t ofx_av_len(struct ofx_av *av) {
  return av->shm ? (size_t)__atomic_load_n(&av->shm->n, __ATOMIC_ACQUIRE) : av->n;
}

static fi_addr_t *shm_map(struct ofx_av_shm *s) {
  return (fi_addr_t *)((char *)(s + 1) + s->cap * sizeof(struct ofx_av_entry));
}

static size_t shm_size(size_t cap) {
  return sizeof(struct ofx_av_shm) +
         cap * (sizeof(struct ofx_av_entry) + sizeof(fi_addr_t));
}

/* Whether the AV object open at fd has a creator that is still running. */
static bool creator_alive(int fd) {
  struct ofx_av_shm h;
  if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != OFX_AV_SHM_MAGIC ||
      h.creator == 0)
    return false;
  return kill((pid_t)h.creator, 0) == 0 || errno == EPERM;
}

/* Creates (or, with FI_READ, maps) the shared table of av named `name`. */
static int shm_attach(struct ofx_av *av, const char *name, size_t count,
                      bool read_only) {
  char path[256];
  int w = snprintf(path, sizeof path, "/omx-fi-av-%s", name);
  if (w < 0 || (size_t)w >= sizeof path || strchr(name, '/') || !*name)
    return -FI_EINVAL;
  int fd = shm_open(path, read_only ? O_RDONLY : O_RDWR | O_CREAT, 0600);
  if (fd < 0)
    return read_only ? -FI_ENOENT : -FI_EIO; /* FI_READ: nobody created it */
  if (!read_only && creator_alive(fd)) {
    close(fd);
    return -FI_EBUSY; /* another live AV has the name */
  }
  size_t cap = count > OFX_AV_SHM_MIN ? count : OFX_AV_SHM_MIN, len = shm_size(cap);
  struct stat st;
  if (read_only) {
    len = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
  } else if (ftruncate(fd, 0) || ftruncate(fd, (off_t)len)) {
    len = 0; /* a left-over object of a creator that died is started afresh */
  }
  void *p = len >= sizeof(struct ofx_av_shm)
                ? mmap(NULL, len, read_only ? PROT_READ : PROT_READ | PROT_WRITE,
                       MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) {
    if (!read_only)
      shm_unlink(path);
    return -FI_EIO;
  }
  struct ofx_av_shm *s = p;
  if (read_only && (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != OFX_AV_SHM_MAGIC ||
                    len < shm_size(s->cap))) {
    munmap(p, len);
    return -FI_EINVAL; /* not (yet) an AV */
  }
  if (!read_only) {
    s->cap = cap;
    s->n = 0;
    s->creator = (uint64_t)getpid();
    __atomic_store_n(&s->magic, OFX_AV_SHM_MAGIC, __ATOMIC_RELEASE);
    av->shm_name = strdup(path);
    if (!av->shm_name) {
      munmap(p, len);
      shm_unlink(path);
      return -FI_ENOMEM;
    }
  }
  av->shm = s;
  av->shm_len = len;
  av->read_only = read_only;
  av->tab = (struct ofx_av_entry *)(s + 1);
  av->cap = (size_t)s->cap;
  return 0;
}

/* The 16-bit id a sender puts in its match bits: low 11 bits of the nic id
 * (a MAC; the loopback board is 0) and the 5-bit endpoint index. Two
 * entries of one AV with the same id make directed receives ambiguous,
 * which fi_av_insert refuses when the domain has FI_DIRECTED_RECV. */
uint16_t ofx_src_id(uint64_t nic_id, uint32_t eid) {
  return (uint16_t)(((nic_id & 0x7ff) << 5) | (eid & 0x1f));
}

fi_addr_t ofx_av_find(struct ofx_av *av, uint64_t nic_id, uint32_t eid) {
  if (!av)
    return FI_ADDR_NOTAVAIL;
  size_t n = ofx_av_len(av);
  for (size_t i = 0; i < n; i++) {
    const struct ofx_av_entry *e = &av->tab[i];
    if (e->used && e->name.nic_id == nic_id && e->name.eid == eid)
      return (fi_addr_t)i;
  }
  return FI_ADDR_NOTAVAIL;
}

int ofx_av_attach(struct ofx_av *av, struct ofx_ep *ep) {
  struct ofx_ep **n = realloc(av->eps, (av->neps + 1) * sizeof *n);
  if (!n)
    return -FI_ENOMEM;
  av->eps = n;
  av->eps[av->neps++] = ep;
  av->dom->refs++;
  return 0;
}

void ofx_av_detach(struct ofx_av *av, struct ofx_ep *ep) {
  for (size_t i = 0; i < av->neps; i++)
    if (av->eps[i] == ep) {
      av->eps[i] = av->eps[--av->neps];
      av->dom->refs--;
      return;
    }
}

static int av_close(struct fid *fid) {
  struct ofx_av *av = (struct ofx_av *)fid;
  struct ofx_domain *d = av->dom;
  ofx_lock(d);
  if (av->neps) {
    ofx_unlock(d);
    return -FI_EBUSY;
  }
  d->refs--;
  ofx_unlock(d);
  if (av->shm) {
    munmap(av->shm, av->shm_len);
    if (av->shm_name)
      shm_unlink(av->shm_name);
    free(av->shm_name);
  } else {
    free(av->tab);
  }
  free(av->eps);
  free(av);
  return 0;
}

static int av_bind(struct fid *fid, struct fid *bfid, uint64_t flags) {
  (void)fid, (void)flags;
  /* An EQ: inserts are synchronous, there is never an event to report. */
  if (bfid && bfid->fclass == FI_CLASS_EQ)
    return 0;
  return -FI_EINVAL;
}

static int av_control(struct fid *fid, int command, void *arg) {
  (void)fid, (void)command, (void)arg;
  return -FI_ENOSYS;
}

static int av_ops_open(struct fid *fid, const char *name, uint64_t flags,
                       void **ops, void *context) {
  (void)fid, (void)name, (void)flags, (void)ops, (void)context;
  return -FI_ENOSYS;
}

static struct fi_ops av_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = av_close,
    .bind = av_bind,
    .control = av_control,
    .ops_open = av_ops_open,
};

/* Checks one name; on a conflict of source ids returns an error. */
static int insert_one(struct ofx_av *av, const struct ofx_name *nm,
                      fi_addr_t *out) {
  if (nm->eid >= 32)
    return -FI_EINVAL;
  if (av->dom->caps & FI_DIRECTED_RECV) {
    uint16_t id = ofx_src_id(nm->nic_id, nm->eid);
    for (size_t i = 0; i < av->n; i++) {
      const struct ofx_av_entry *e = &av->tab[i];
      if (e->used && ofx_src_id(e->name.nic_id, e->name.eid) == id &&
          (e->name.nic_id != nm->nic_id || e->name.eid != nm->eid))
        return -FI_EADDRINUSE;
    }
  }
  if (av->shm && av->n == av->cap)
    return -FI_ENOSPC; /* a shared table does not move */
  if (av->n == av->cap) {
    size_t cap = av->cap ? av->cap * 2 : 64;
    struct ofx_av_entry *t = realloc(av->tab, cap * sizeof *t);
    if (!t)
      return -FI_ENOMEM;
    av->tab = t;
    av->cap = cap;
  }
  av->tab[av->n].name = *nm;
  av->tab[av->n].used = true;
  *out = (fi_addr_t)av->n++;
  if (av->shm) {
    shm_map(av->shm)[*out] = *out;
    __atomic_store_n(&av->shm->n, av->n, __ATOMIC_RELEASE); /* publish */
  }
  return 0;
}

static int av_insert(struct fid_av *fav, const void *addr, size_t count,
                     fi_addr_t *fi_addr, uint64_t flags, void *context) {
  struct ofx_av *av = (struct ofx_av *)fav;
  /* FI_SYNC_ERR: context is an int per address, 0 or the fabric errno of its
   * failure (fi_av(3)); inserts are always synchronous here. */
  int *sync_err = (flags & FI_SYNC_ERR) ? context : NULL;
  if ((count && !addr) || (flags & ~(FI_MORE | FI_SYNC_ERR)) ||
      (count && (flags & FI_SYNC_ERR) && !sync_err))
    return -FI_EINVAL;
  if (av->read_only)
    return -FI_EACCES; /* opened FI_READ: its creator inserts */
  const struct ofx_name *names = addr;
  int inserted = 0;
  ofx_lock(av->dom);
  for (size_t i = 0; i < count; i++) {
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    int ret = insert_one(av, &names[i], &a);
    if (fi_addr)
      fi_addr[i] = a;
    if (sync_err)
      sync_err[i] = -ret;
    if (ret == -FI_ENOMEM) {
      for (size_t k = i + 1; k < count; k++) {
        if (fi_addr)
          fi_addr[k] = FI_ADDR_NOTAVAIL;
        if (sync_err)
          sync_err[k] = FI_ECANCELED; /* not tried */
      }
      ofx_unlock(av->dom);
      return ret;
    }
    if (ret == 0)
      inserted++;
  }
  ofx_unlock(av->dom);
  return inserted;
}

/* One node and service as fi_getinfo reads them (an IP address, host name
 * or board name; an endpoint index or a port). */
static int name_of(const char *node, const char *service, struct ofx_name *nm) {
  if (!node || !service || !*service ||
      ofx_parse_service(service, &nm->eid, &nm->key))
    return -FI_EINVAL;
  return ofx_lookup_host(node, &nm->nic_id);
}

static int av_insertsvc(struct fid_av *fav, const char *node,
                        const char *service, fi_addr_t *fi_addr,
                        uint64_t flags, void *context) {
  if ((flags & ~(FI_MORE | FI_SYNC_ERR)) || ((flags & FI_SYNC_ERR) && !context))
    return -FI_EINVAL;
  struct ofx_name nm;
  int ret = name_of(node, service, &nm);
  if (ret) {
    if (flags & FI_SYNC_ERR)
      *(int *)context = -ret;
    return ret;
  }
  return av_insert(fav, &nm, 1, fi_addr, flags & FI_SYNC_ERR, context);
}

/* Node i of a symmetric range starting at node: an IPv4 or IPv6 address plus
 * i, or a name whose host part (before any ":board") ends in a number, that
 * number plus i (its width kept). */
static int nth_node(const char *node, size_t i, char *out, size_t outlen) {
  unsigned char a[16];
  if (inet_pton(AF_INET, node, a) == 1) {
    uint32_t v;
    memcpy(&v, a, 4);
    v = htonl(ntohl(v) + (uint32_t)i);
    return inet_ntop(AF_INET, &v, out, (socklen_t)outlen) ? 0 : -FI_EINVAL;
  }
  if (inet_pton(AF_INET6, node, a) == 1) {
    size_t carry = i;
    for (int k = 15; k >= 0 && carry; k--) {
      size_t sum = a[k] + (carry & 0xff);
      a[k] = (unsigned char)sum;
      carry = (carry >> 8) + (sum >> 8);
    }
    return inet_ntop(AF_INET6, a, out, (socklen_t)outlen) ? 0 : -FI_EINVAL;
  }
  size_t host_len = strcspn(node, ":");
  size_t digits = 0;
  while (digits < host_len && node[host_len - 1 - digits] >= '0' &&
         node[host_len - 1 - digits] <= '9')
    digits++;
  if (i && !digits)
    return -FI_EINVAL; /* a range of names needs a numeric suffix */
  unsigned long long n = digits ? strtoull(node + host_len - digits, NULL, 10) : 0;
  int w = snprintf(out, outlen, "%.*s%0*llu%s", (int)(host_len - digits), node,
                   (int)digits, n + i, node + host_len);
  if (!digits)
    w = snprintf(out, outlen, "%s", node);
  return w < 0 || (size_t)w >= outlen ? -FI_EINVAL : 0;
}

static int av_insertsym(struct fid_av *fav, const char *node, size_t nodecnt,
                        const char *service, size_t svccnt, fi_addr_t *fi_addr,
                        uint64_t flags, void *context) {
  int *sync_err = (flags & FI_SYNC_ERR) ? context : NULL;
  if (!node || !service || !nodecnt || !svccnt || (flags & ~(FI_MORE | FI_SYNC_ERR)) ||
      ((flags & FI_SYNC_ERR) && !sync_err))
    return -FI_EINVAL;
  char *end;
  unsigned long svc0 = strtoul(service, &end, 10);
  if (*end || !*service || svc0 + svccnt - 1 > 65535)
    return -FI_EINVAL;
  char host[256];
  int ret = nth_node(node, nodecnt - 1, host, sizeof host);
  if (ret)
    return ret; /* the range cannot be formed: insert nothing */
  int inserted = 0;
  for (size_t i = 0; i < nodecnt; i++) {
    nth_node(node, i, host, sizeof host);
    uint64_t nic;
    bool found = ofx_lookup_host(host, &nic) == 0;
    for (size_t j = 0; j < svccnt; j++) {
      fi_addr_t *out = fi_addr ? &fi_addr[i * svccnt + j] : NULL;
      int *err = sync_err ? &sync_err[i * svccnt + j] : NULL;
      char svc[16];
      struct ofx_name nm = {.nic_id = nic};
      snprintf(svc, sizeof svc, "%lu", svc0 + j);
      if (!found || ofx_parse_service(svc, &nm.eid, &nm.key)) {
        if (out)
          *out = FI_ADDR_NOTAVAIL;
        if (err)
          *err = found ? FI_EINVAL : FI_EADDRNOTAVAIL;
        continue;
      }
      ret = av_insert(fav, &nm, 1, out, flags & FI_SYNC_ERR, err);
      if (ret < 0)
        return ret;
      inserted += ret;
    }
  }
  return inserted;
}

static int av_remove(struct fid_av *fav, fi_addr_t *fi_addr, size_t count,
                     uint64_t flags) {
  struct ofx_av *av = (struct ofx_av *)fav;
  if ((count && !fi_addr) || flags)
    return -FI_EINVAL;
  if (av->read_only)
    return -FI_EACCES;
  int ret = 0;
  ofx_lock(av->dom);
  for (size_t i = 0; i < count; i++) {
    fi_addr_t a = fi_addr[i];
    if (a >= av->n || !av->tab[a].used) {
      ret = -FI_EINVAL;
      continue;
    }
    av->tab[a].used = false;
    for (size_t k = 0; k < av->neps; k++)
      ofx_ep_forget_conn(av->eps[k], a);
  }
  ofx_unlock(av->dom);
  return ret;
}

static int av_lookup(struct fid_av *fav, fi_addr_t fi_addr, void *addr,
                     size_t *addrlen) {
  struct ofx_av *av = (struct ofx_av *)fav;
  if (!addrlen || (*addrlen && !addr))
    return -FI_EINVAL;
  ofx_lock(av->dom);
  if (fi_addr >= ofx_av_len(av) || !av->tab[fi_addr].used) {
    ofx_unlock(av->dom);
    return -FI_ENOENT;
  }
  struct ofx_name nm = av->tab[fi_addr].name;
  ofx_unlock(av->dom);
  size_t want = sizeof nm;
  memcpy(addr, &nm, *addrlen < want ? *addrlen : want);
  *addrlen = want;
  return 0;
}

static const char *av_straddr(struct fid_av *av, const void *addr, char *buf,
                              size_t *len) {
  (void)av;
  if (!addr || !buf || !len)
    return NULL;
  const struct ofx_name *nm = addr;
  char tmp[64];
  int n = snprintf(tmp, sizeof tmp, "omx://%012llx:%u:%08x",
                   (unsigned long long)nm->nic_id, nm->eid, nm->key);
  if (*len)
    snprintf(buf, *len, "%s", tmp);
  *len = (size_t)n + 1;
  return buf;
}

static int av_set(struct fid_av *av, struct fi_av_set_attr *attr,
                  struct fid_av_set **av_set, void *context) {
  (void)av, (void)attr, (void)av_set, (void)context;
  return -FI_ENOSYS;
}

static struct fi_ops_av av_ops = {
    .size = sizeof(struct fi_ops_av),
    .insert = av_insert,
    .insertsvc = av_insertsvc,
    .insertsym = av_insertsym,
    .remove = av_remove,
    .lookup = av_lookup,
    .straddr = av_straddr,
    .av_set = av_set,
};

int ofx_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
                struct fid_av **fav, void *context) {
  struct ofx_domain *d = (struct ofx_domain *)domain;
  if (!domain || !attr || !fav)
    return -FI_EINVAL;
  if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP &&
      attr->type != FI_AV_TABLE)
    return -FI_EINVAL;
  /* FI_SYMMETRIC is a promise about the addresses inserted (fi_av(3)), a hint
   * that asks nothing of the provider. */
  if (attr->rx_ctx_bits || (attr->flags & ~(FI_EVENT | FI_READ | FI_SYMMETRIC)) ||
      (attr->flags & FI_EVENT))
    return -FI_ENOSYS; /* no scalable endpoints, no events */
  if ((attr->flags & FI_READ) && !attr->name)
    return -FI_EINVAL; /* read-only makes sense for a shared AV only */
  struct ofx_av *av = calloc(1, sizeof *av);
  if (!av)
    return -FI_ENOMEM;
  av->fid.fid.fclass = FI_CLASS_AV;
  av->fid.fid.context = context;
  av->fid.fid.ops = &av_fi_ops;
  av->fid.ops = &av_ops;
  av->dom = d;
  av->type = attr->type == FI_AV_UNSPEC ? FI_AV_TABLE : attr->type;
  if (attr->name) {
    int ret = shm_attach(av, attr->name, attr->count, attr->flags & FI_READ);
    if (ret) {
      free(av);
      return ret;
    }
    attr->map_addr = shm_map(av->shm);
  }
  ofx_lock(d);
  d->refs++;
  ofx_unlock(d);
  *fav = &av->fid;
  return 0;
}
