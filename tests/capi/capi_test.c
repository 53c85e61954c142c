/* The C API against the embedded target: data written and read back in both completion modes,
 * the blocking forms, write zeroes, DSM, flush, stats, the log hook, bad arguments, and volumes
 * sharing an engine of their own (nvmeof_host), paths added and removed at run time.
 * Called as `capi-test ADDR:PORT NQN` (tests/integration/run_example.sh starts the target). */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvmeof/nvmeof.h"

/* 0 when the library is built without metrics support (meson sets it from -Dmetrics). */
#ifndef NVMEOF_TEST_METRICS
#define NVMEOF_TEST_METRICS 1
#endif

static int failures = 0;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                          \
    }                                                                      \
  } while (0)
#define REQUIRE(cond)                                                      \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

enum { kBlocks = 64 };

static void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (uint8_t)((i * 131u + seed * 7u + (i >> 9)) & 0xff);
}

static int verify(const uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != (uint8_t)((i * 131u + seed * 7u + (i >> 9)) & 0xff)) return 0;
  return 1;
}

/* Completion-queue mode: kBlocks writes of one block each, reaped through the eventfd, then
 * kBlocks reads verified. */
static void test_queue_mode(const char* addr, const char* nqn) {
  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  o.subnqn = nqn;
  o.queue_depth = 16; /* fewer slots than I/Os: -EAGAIN must appear and be survivable */
  o.io_deadline_ms = 2000; /* a loaded test machine is not a failing path */
  nvmeof_volume* vol = NULL;
  const char* paths[] = {addr};
  REQUIRE(nvmeof_volume_open(paths, 1, &o, &vol) == 0);
  const uint32_t bs = nvmeof_volume_block_size(vol);
  CHECK(bs == 512 || bs == 4096);
  CHECK(nvmeof_volume_size(vol) == 16u << 20);
  CHECK(nvmeof_volume_queue_depth(vol) == 16);
  const int efd = nvmeof_volume_event_fd(vol);
  REQUIRE(efd >= 0);

  uint8_t* buf = NULL;
  REQUIRE(nvmeof_buffer_alloc((size_t)kBlocks * bs, -1, (void**)&buf) == 0);
  CHECK(((uintptr_t)buf & 4095) == 0);
  for (int op = 0; op < 2; ++op) {
    if (op == 0) fill(buf, (size_t)kBlocks * bs, 1);
    else memset(buf, 0, (size_t)kBlocks * bs);
    int seen[kBlocks] = {0};
    int submitted = 0, done = 0, eagain = 0;
    while (done < kBlocks) {
      while (submitted < kBlocks) {
        uint8_t* p = buf + (size_t)submitted * bs;
        const uint64_t off = (uint64_t)submitted * bs;
        int rc = op == 0 ? nvmeof_submit_write(vol, p, bs, off, 1000 + submitted)
                         : nvmeof_submit_read(vol, p, bs, off, 1000 + submitted);
        if (rc == -EAGAIN) {
          ++eagain;
          break;
        }
        REQUIRE(rc == 0);
        ++submitted;
      }
      struct pollfd pfd = {efd, POLLIN, 0};
      REQUIRE(poll(&pfd, 1, 30000) == 1); /* a completion must make the eventfd readable */
      nvmeof_event ev[8];
      int n;
      while ((n = nvmeof_volume_reap(vol, ev, 8)) > 0) {
        for (int i = 0; i < n; ++i) {
          CHECK(nvmeof_status_ok(ev[i].status));
          CHECK(ev[i].op == (op == 0 ? NVMEOF_OP_WRITE : NVMEOF_OP_READ));
          const uint64_t k = ev[i].cookie - 1000;
          REQUIRE(k < kBlocks);
          CHECK(!seen[k]);
          seen[k] = 1;
          ++done;
        }
      }
      REQUIRE(n == 0);
    }
    CHECK(eagain > 0);
  }
  CHECK(verify(buf, (size_t)kBlocks * bs, 1));
  /* Nothing outstanding: the eventfd must not stay readable. */
  struct pollfd pfd = {efd, POLLIN, 0};
  CHECK(poll(&pfd, 1, 0) == 0);

  /* Write zeroes and DSM, then the blocks read back as zeroes (the target zeroes deallocated
   * blocks). */
  REQUIRE(nvmeof_submit_write_zeroes(vol, 2 * bs, 0, 7) == 0);
  static nvmeof_dsm_range range;
  range.attributes = 0;
  range.nlb = 2;
  range.slba = 4;
  REQUIRE(nvmeof_submit_dsm(vol, &range, 1, 8) == 0);
  REQUIRE(nvmeof_submit_flush(vol, 9) == 0);
  int got = 0;
  while (got < 3) {
    struct pollfd p2 = {efd, POLLIN, 0};
    REQUIRE(poll(&p2, 1, 30000) == 1);
    nvmeof_event ev[4];
    int n = nvmeof_volume_reap(vol, ev, 4);
    REQUIRE(n >= 0);
    for (int i = 0; i < n; ++i) {
      CHECK(ev[i].cookie >= 7 && ev[i].cookie <= 9);
      CHECK(nvmeof_status_ok(ev[i].status));
    }
    got += n;
  }
  uint8_t* z = malloc((size_t)8 * bs);
  REQUIRE(z);
  nvmeof_status st = 0xffff;
  CHECK(nvmeof_read(vol, z, (size_t)8 * bs, 0, &st) == 0);
  CHECK(st == 0);
  int zero_ok = 1;
  for (size_t i = 0; i < 2 * bs; ++i) zero_ok &= z[i] == 0;
  for (size_t i = 4 * bs; i < 6 * bs; ++i) zero_ok &= z[i] == 0;
  CHECK(zero_ok);
  CHECK(memcmp(z + 2 * bs, buf + 2 * bs, 2 * bs) == 0); /* untouched blocks keep their data */
  free(z);

  char* json = NULL;
  REQUIRE(nvmeof_volume_stats_json(vol, &json) == 0);
  CHECK(strstr(json, "\"paths\"") != NULL);
  CHECK(strstr(json, "\"completed\"") != NULL);
  nvmeof_string_free(json);

  /* Bad arguments. */
  CHECK(nvmeof_submit_read(vol, buf, bs - 1, 0, 0) == -EINVAL);   /* not a block multiple */
  CHECK(nvmeof_submit_read(vol, buf, bs, 1, 0) == -EINVAL);       /* unaligned offset */
  CHECK(nvmeof_submit_read(vol, buf, 0, 0, 0) == -EINVAL);        /* empty */
  CHECK(nvmeof_submit_read(vol, NULL, bs, 0, 0) == -EINVAL);
  CHECK(nvmeof_submit_read(vol, buf, bs, nvmeof_volume_size(vol), 0) == -EINVAL); /* past end */
  CHECK(nvmeof_submit_write(vol, buf, 2 * bs, nvmeof_volume_size(vol) - bs, 0) == -EINVAL);
  CHECK(nvmeof_submit_dsm(vol, &range, 0, 0) == -EINVAL);
  CHECK(nvmeof_read(vol, buf, bs, (uint64_t)1 << 62, NULL) == -EINVAL);
  CHECK(nvmeof_volume_reap(vol, NULL, 4) == -EINVAL);
  CHECK(nvmeof_volume_reap(NULL, NULL, 4) == -EINVAL);
  CHECK(nvmeof_submit_read(NULL, buf, bs, 0, 0) == -EINVAL);
  nvmeof_event ev1;
  CHECK(nvmeof_volume_reap(vol, &ev1, 1) == 0); /* the rejected ones queued nothing */
  nvmeof_buffer_free(buf);
  CHECK(nvmeof_volume_close(vol) == 0);
}

struct cb_state {
  atomic_int done;
  atomic_int bad;
  uint8_t* buf;
  uint32_t bs;
};

static void on_complete(const nvmeof_event* ev, void* ctx) {
  struct cb_state* s = ctx;
  if (!nvmeof_status_ok(ev->status) || ev->cookie >= kBlocks || ev->op != NVMEOF_OP_READ) {
    fprintf(stderr, "callback: cookie %llu status 0x%x op %u\n", (unsigned long long)ev->cookie,
            ev->status, ev->op);
    atomic_fetch_add(&s->bad, 1);
  }
  atomic_fetch_add(&s->done, 1);
}

/* Callback mode: the same data read back (written by the queue-mode test, blocks 6..63 still
 * carry it), and no event fd, no reap. */
static void test_callback_mode(const char* addr, const char* nqn) {
  struct cb_state s;
  atomic_init(&s.done, 0);
  atomic_init(&s.bad, 0);
  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  o.subnqn = nqn;
  o.io_deadline_ms = 2000;
  o.completion_cb = on_complete;
  o.completion_ctx = &s;
  nvmeof_volume* vol = NULL;
  const char* paths[] = {addr};
  REQUIRE(nvmeof_volume_open(paths, 1, &o, &vol) == 0);
  s.bs = nvmeof_volume_block_size(vol);
  REQUIRE(nvmeof_buffer_alloc((size_t)kBlocks * s.bs, 0, (void**)&s.buf) == 0);
  CHECK(nvmeof_volume_event_fd(vol) == -EINVAL);
  nvmeof_event ev;
  CHECK(nvmeof_volume_reap(vol, &ev, 1) == -EINVAL);
  for (int i = 0; i < kBlocks; ++i)
    REQUIRE(nvmeof_submit_read(vol, s.buf + (size_t)i * s.bs, s.bs, (uint64_t)i * s.bs, i) == 0);
  /* close waits for every read in flight: after it all callbacks have run, successfully. */
  CHECK(nvmeof_volume_close(vol) == 0);
  CHECK(atomic_load(&s.done) == kBlocks);
  CHECK(atomic_load(&s.bad) == 0);
  uint8_t* expect = malloc((size_t)kBlocks * s.bs);
  REQUIRE(expect);
  fill(expect, (size_t)kBlocks * s.bs, 1);
  CHECK(memcmp(s.buf + 6 * s.bs, expect + 6 * s.bs, (size_t)(kBlocks - 6) * s.bs) == 0);
  free(expect);
  nvmeof_buffer_free(s.buf);
}

static atomic_int log_lines;
static void on_log(int level, const char* msg, void* ctx) {
  (void)ctx;
  if (level >= NVMEOF_LOG_ERROR && strncmp(msg, "nvmeof:", 7) == 0 && !strchr(msg, '\n'))
    atomic_fetch_add(&log_lines, 1);
}

static void test_bad_open(const char* nqn) {
  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  CHECK(o.kato_ms == NVMEOF_KATO_SHORTEST); /* the C++ default too */
  o.subnqn = nqn;
  nvmeof_volume* vol = (nvmeof_volume*)1;
  const char* bad[] = {"not an address:99999"};
  CHECK(nvmeof_volume_open(bad, 1, &o, &vol) == -EINVAL);
  CHECK(vol == NULL);
  /* The errno is coarse; the reason is kept in words. */
  CHECK(strstr(nvmeof_last_error(), "path address 'not an address:99999'") != NULL);
  CHECK(nvmeof_last_error_status() == 0);
  CHECK(nvmeof_volume_open(NULL, 0, &o, &vol) == -EINVAL);
  const char* ok[] = {"127.0.0.1:4420"};
  CHECK(nvmeof_volume_open(ok, 1, NULL, &vol) == -EINVAL);
  nvmeof_volume_options o2 = o;
  o2.subnqn = NULL;
  CHECK(nvmeof_volume_open(ok, 1, &o2, &vol) == -EINVAL);
  o2 = o;
  o2.queue_depth = 0;
  CHECK(nvmeof_volume_open(ok, 1, &o2, &vol) == -EINVAL);
  o2 = o;
  o2.struct_size = 4;
  CHECK(nvmeof_volume_open(ok, 1, &o2, &vol) == -EINVAL);
  CHECK(nvmeof_buffer_alloc(0, -1, (void**)&vol) == -EINVAL);
  CHECK(strlen(nvmeof_strerror(-EINVAL)) > 0);
  char sbuf[80];
  CHECK(strstr(nvmeof_status_str(0x4080, sbuf, sizeof sbuf), "lba") != NULL);
  CHECK(nvmeof_status_sct(0x4080) == 0 && nvmeof_status_sc(0x4080) == 0x80 &&
        nvmeof_status_dnr(0x4080));

  /* A port nobody listens on: open fails with an errno and the reason goes to the log hook. */
  atomic_init(&log_lines, 0);
  nvmeof_set_log_callback(on_log, NULL);
  const char* closed[] = {"127.0.0.1:1"};
  const int rc = nvmeof_volume_open(closed, 1, &o, &vol);
  CHECK(rc < 0 && rc != -EINVAL);
  CHECK(vol == NULL);
  CHECK(atomic_load(&log_lines) > 0);
  nvmeof_set_log_callback(NULL, NULL);
}

/* TLS fields against the plaintext target: a TLS open of a port that does not offer TLS fails
 * with -EPROTONOSUPPORT (not a hang), a malformed key and TLS on without a key with -EINVAL. */
static void test_tls_open(const char* addr, const char* nqn) {
  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  o.subnqn = nqn;
  o.no_path_timeout_ms = 2000;
  CHECK(o.tls == NVMEOF_TLS_WHEN_KEYED && o.tls_psk == NULL);
  nvmeof_volume* vol = NULL;
  const char* paths[] = {addr};
  /* 32 bytes 00..1f with their CRC-32: a well-formed SHA-256 key. */
  o.tls_psk = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
  CHECK(nvmeof_volume_open(paths, 1, &o, &vol) == -EPROTONOSUPPORT);
  CHECK(vol == NULL);
  CHECK(strstr(nvmeof_last_error(), "does not offer TLS") != NULL);
  o.tls_psk = "NVMeTLSkey-1:01:bad:";
  CHECK(nvmeof_volume_open(paths, 1, &o, &vol) == -EINVAL);
  o.tls_psk = NULL;
  o.tls = NVMEOF_TLS_ON;
  CHECK(nvmeof_volume_open(paths, 1, &o, &vol) == -EINVAL);
  o.tls = 7;
  CHECK(nvmeof_volume_open(paths, 1, &o, &vol) == -EINVAL);
  CHECK(strstr(nvmeof_last_error(), "invalid nvmeof_volume_options") != NULL);
  /* TLS off: the plaintext port serves the volume even with a key set. */
  o.tls = NVMEOF_TLS_OFF;
  o.tls_psk = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
  REQUIRE(nvmeof_volume_open(paths, 1, &o, &vol) == 0);
  nvmeof_volume_close(vol);
}

/* A Connect the controller refuses (a subsystem the target does not have): the errno says only
 * that it failed, nvmeof_last_error_status() gives the controller's status and
 * nvmeof_last_error() its meaning. */
static void test_refused_connect(const char* addr) {
  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  o.subnqn = "nqn.2024-01.io.nvmeof:no-such-subsystem";
  o.no_path_timeout_ms = 2000;
  nvmeof_volume* vol = NULL;
  const char* paths[] = {addr};
  CHECK(nvmeof_volume_open(paths, 1, &o, &vol) < 0);
  CHECK(vol == NULL);
  const nvmeof_status st = nvmeof_last_error_status();
  CHECK(st != 0);
  CHECK(nvmeof_status_sct(st) == 1); /* command specific: a Connect status */
  CHECK(strstr(nvmeof_last_error(), "NVMe status") != NULL);
}

/* Writes `nblocks` blocks of pattern `seed` at block `first` through `w`, then reads them back
 * through `r` and checks them. */
static void write_then_read(nvmeof_volume* w, nvmeof_volume* r, uint64_t first, size_t nblocks,
                            uint32_t seed) {
  const uint32_t bs = nvmeof_volume_block_size(w);
  const size_t n = nblocks * bs;
  uint8_t* out = NULL;
  uint8_t* in = NULL;
  REQUIRE(nvmeof_buffer_alloc(n, -1, (void**)&out) == 0);
  REQUIRE(nvmeof_buffer_alloc(n, -1, (void**)&in) == 0);
  fill(out, n, seed);
  nvmeof_status st = 0xffff;
  CHECK(nvmeof_write(w, out, n, first * bs, &st) == 0 && st == 0);
  st = 0xffff;
  CHECK(nvmeof_read(r, in, n, first * bs, &st) == 0 && st == 0);
  CHECK(verify(in, n, seed));
  nvmeof_buffer_free(out);
  nvmeof_buffer_free(in);
}

static int host_volumes(const nvmeof_host* h) {
  nvmeof_host_stats hs;
  memset(&hs, 0, sizeof hs);
  hs.struct_size = sizeof hs;
  const int rc = nvmeof_host_stats_get(h, &hs);
  return rc < 0 ? rc : (int)hs.volumes;
}

/* Volumes on an engine of the caller's: the same namespace opened twice and once more through
 * discovery, all on one two-reactor host; data written through each is read back through
 * another. The host handle is closed before the volumes, which keep the engine running. */
static void test_host(const char* addr, const char* nqn) {
  nvmeof_host_options ho;
  nvmeof_host_options_init(&ho);
  CHECK(ho.reactors == 1 && ho.poll == NVMEOF_POLL_ADAPTIVE && ho.placement == NVMEOF_PLACEMENT_NUMA);
  CHECK(ho.cpus == NULL && ho.ncpus == 0 && ho.sqe_size == NVMEOF_SQE_64 && ho.metrics_listen == NULL);
  static const int cpus[] = {0, 1};
  ho.reactors = 2;
  ho.cpus = cpus; /* a CPU this process may not use leaves its reactor unpinned */
  ho.ncpus = 2;
  nvmeof_host* host = NULL;
  REQUIRE(nvmeof_host_create(&ho, &host) == 0);
  REQUIRE(host != NULL);

  nvmeof_host_stats hs;
  memset(&hs, 0, sizeof hs);
  hs.struct_size = sizeof hs;
  REQUIRE(nvmeof_host_stats_get(host, &hs) == 0);
  CHECK(hs.reactors == 2);
  CHECK(hs.threads > hs.reactors); /* and the control thread and the pool */
  CHECK(hs.volumes == 0);

  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  o.subnqn = nqn;
  o.io_deadline_ms = 2000;
  o.reactors = 7; /* not used: the host's own options hold */
  const char* paths[] = {addr};
  nvmeof_volume* a = NULL;
  nvmeof_volume* b = NULL;
  nvmeof_volume* c = NULL;
  REQUIRE(nvmeof_volume_open_on(host, paths, 1, &o, &a) == 0);
  REQUIRE(nvmeof_volume_open_on(host, paths, 1, &o, &b) == 0);
  CHECK(host_volumes(host) == 2);
  REQUIRE(nvmeof_host_stats_get(host, &hs) == 0);
  CHECK(hs.subsystems == 1); /* the second volume shares the first one's controller */
  CHECK(hs.controllers == 1);
  REQUIRE(nvmeof_volume_open_discovered_on(host, addr, &o, &c) == 0);
  CHECK(host_volumes(host) == 3);
  REQUIRE(nvmeof_host_stats_get(host, &hs) == 0);
  CHECK(hs.reactors == 2); /* no volume added a thread */

  write_then_read(a, b, 100, 16, 21);
  write_then_read(b, a, 200, 16, 22);
  write_then_read(c, a, 300, 4, 23);
  REQUIRE(nvmeof_host_stats_get(host, &hs) == 0);
  CHECK(hs.reactor_wakeups > 0);

  /* Bad arguments around hosts. */
  nvmeof_volume* bad = (nvmeof_volume*)1;
  CHECK(nvmeof_volume_open_on(NULL, paths, 1, &o, &bad) == -EINVAL);
  CHECK(bad == NULL);
  CHECK(nvmeof_volume_open_discovered_on(NULL, addr, &o, &bad) == -EINVAL);
  CHECK(nvmeof_volume_open_on(host, NULL, 0, &o, &bad) == -EINVAL);
  nvmeof_host_stats small = hs;
  small.struct_size = 4;
  CHECK(nvmeof_host_stats_get(host, &small) == -EINVAL);
  CHECK(nvmeof_host_stats_get(NULL, &hs) == -EINVAL);
  CHECK(nvmeof_host_close(NULL) == -EINVAL);
  CHECK(nvmeof_host_metrics_port(host) == 0); /* no metrics_listen */
  CHECK(nvmeof_host_metrics_port(NULL) == -EINVAL);
  nvmeof_host* h2 = (nvmeof_host*)1;
  nvmeof_host_options bo = ho;
#if NVMEOF_TEST_METRICS
  bo.metrics_listen = "nonsense";
  CHECK(nvmeof_host_create(&bo, &h2) == -EINVAL);
  CHECK(h2 == NULL);
  bo.metrics_listen = "127.0.0.1:0";
  REQUIRE(nvmeof_host_create(&bo, &h2) == 0);
  CHECK(nvmeof_host_metrics_port(h2) > 0); /* its own endpoint, on a port the kernel picked */
  CHECK(nvmeof_host_close(h2) == 0);
#else
  bo.metrics_listen = "127.0.0.1:0"; /* a library built without metrics support refuses it */
  CHECK(nvmeof_host_create(&bo, &h2) == -EOPNOTSUPP);
  CHECK(h2 == NULL);
#endif
  h2 = (nvmeof_host*)1;
  bo = ho;
  bo.reactors = 0;
  CHECK(nvmeof_host_create(&bo, &h2) == -EINVAL);
  CHECK(h2 == NULL);
  bo = ho;
  bo.poll = 9;
  CHECK(nvmeof_host_create(&bo, &h2) == -EINVAL);
  bo = ho;
  bo.placement = 9;
  CHECK(nvmeof_host_create(&bo, &h2) == -EINVAL);
  bo = ho;
  bo.cpus = NULL;
  CHECK(nvmeof_host_create(&bo, &h2) == -EINVAL); /* ncpus 2 without a list */
  bo = ho;
  bo.struct_size = 4;
  CHECK(nvmeof_host_create(&bo, &h2) == -EINVAL);
  CHECK(nvmeof_host_create(NULL, &h2) == -EINVAL);

  /* fork: the child has none of the engine's threads; every call on the parent's host refuses,
   * close only forgets the handle. */
  fflush(NULL);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int ok = nvmeof_host_stats_get(host, &hs) == -ECHILD;
    nvmeof_volume* v = NULL;
    ok &= nvmeof_volume_open_on(host, paths, 1, &o, &v) == -ECHILD && v == NULL;
    ok &= nvmeof_read(a, NULL, 0, 0, NULL) == -ECHILD;
    ok &= nvmeof_host_close(host) == 0;
    _exit(ok ? 0 : 1);
  }
  int wst = 0;
  REQUIRE(waitpid(pid, &wst, 0) == pid);
  CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);

  /* The caller's reference goes first: the volumes still hold the engine. */
  CHECK(nvmeof_host_close(host) == 0);
  write_then_read(a, b, 400, 8, 24);
  write_then_read(b, c, 500, 8, 25);
  CHECK(nvmeof_volume_close(a) == 0);
  write_then_read(c, b, 600, 8, 26);
  CHECK(nvmeof_volume_close(b) == 0);
  CHECK(nvmeof_volume_close(c) == 0); /* the last holder: the engine stops */
}

/* Paths at run time: an address already a path is refused, an unreachable one is added (it is
 * retried in the background, I/O unharmed) and removed, bad and unknown addresses get clear
 * errors; data written after it all reads back. */
static void test_runtime_paths(const char* addr, const char* nqn) {
  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  o.subnqn = nqn;
  nvmeof_volume* vol = NULL;
  const char* paths[] = {addr};
  REQUIRE(nvmeof_volume_open(paths, 1, &o, &vol) == 0);
  CHECK(nvmeof_volume_add_path(vol, addr) == -EEXIST);
  CHECK(strstr(nvmeof_last_error(), "already a path") != NULL);
  CHECK(nvmeof_volume_add_path(vol, "127.0.0.1:0") == -EINVAL); /* port out of range */
  CHECK(strstr(nvmeof_last_error(), "127.0.0.1:0") != NULL);
  CHECK(nvmeof_volume_add_path(vol, NULL) == -EINVAL);
  const int idx = nvmeof_volume_add_path(vol, "127.0.0.1:1"); /* nothing listens: refused */
  CHECK(idx == 1);
  CHECK(nvmeof_volume_add_path(vol, "127.0.0.1:1") == -EEXIST);
  const uint32_t bs = nvmeof_volume_block_size(vol);
  uint8_t* buf = NULL;
  REQUIRE(nvmeof_buffer_alloc(4 * (size_t)bs, 0, (void**)&buf) == 0);
  fill(buf, 4 * (size_t)bs, 77);
  nvmeof_status st = 0;
  CHECK(nvmeof_write(vol, buf, 4 * (size_t)bs, 40 * (uint64_t)bs, &st) == 0 && st == 0);
  CHECK(nvmeof_volume_remove_path(vol, "127.0.0.1:1") == 0);
  CHECK(nvmeof_volume_remove_path(vol, "127.0.0.1:1") == -ENOENT);
  CHECK(strstr(nvmeof_last_error(), "not a path") != NULL);
  memset(buf, 0, 4 * (size_t)bs);
  CHECK(nvmeof_read(vol, buf, 4 * (size_t)bs, 40 * (uint64_t)bs, &st) == 0 && st == 0);
  CHECK(verify(buf, 4 * (size_t)bs, 77));
  nvmeof_buffer_free(buf);
  CHECK(nvmeof_volume_close(vol) == 0);
}

/* Persistent discovery on a host: watched once, listed, its events empty, stopped; bad input. */
static void test_discovery(const char* addr) {
  nvmeof_host_options ho;
  nvmeof_host_options_init(&ho);
  nvmeof_host* h = NULL;
  REQUIRE(nvmeof_host_create(&ho, &h) == 0);
  CHECK(nvmeof_host_add_discovery(h, addr, NULL) == 0);
  CHECK(nvmeof_host_add_discovery(h, addr, NULL) == -EEXIST);
  CHECK(nvmeof_host_add_discovery(h, "not an address:x", NULL) == -EINVAL);
  CHECK(nvmeof_host_add_discovery(NULL, addr, NULL) == -EINVAL);
  char* j = NULL;
  int connected = 0;
  for (int i = 0; i < 2000 && !connected; ++i) { /* bounded: 20 s */
    REQUIRE(nvmeof_host_discovery_json(h, &j) == 0);
    connected = strstr(j, "\"connected\":true") != NULL && strstr(j, "\"log_reads\":0") == NULL;
    nvmeof_string_free(j);
    if (!connected) poll(NULL, 0, 10);
  }
  CHECK(connected);
  REQUIRE(nvmeof_host_namespace_events_json(h, &j) == 0);
  CHECK(strcmp(j, "[]") == 0);
  nvmeof_string_free(j);
  CHECK(nvmeof_host_remove_discovery(h, addr) == 0);
  CHECK(nvmeof_host_remove_discovery(h, addr) == -ENOENT);
  CHECK(nvmeof_host_close(h) == 0);
}

/* nvmeof_volume_reap_wait: kBlocks writes then reads, each batch reaped in one call that waits
 * for all of it, on a host whose callers drive its reactor and on one whose do not (the host's
 * driven_turns tells which ran them); then its bad arguments and its timeout. */
static void test_reap_wait(const char* addr, const char* nqn) {
  for (int drive = 1; drive >= 0; --drive) {
    nvmeof_host_options ho;
    nvmeof_host_options_init(&ho);
    CHECK(ho.caller_drive == 0);
    ho.caller_drive = (uint32_t)drive;
    ho.placement = NVMEOF_PLACEMENT_UNPINNED;
    nvmeof_host* host = NULL;
    REQUIRE(nvmeof_host_create(&ho, &host) == 0);
    nvmeof_volume_options o;
    nvmeof_volume_options_init(&o);
    o.subnqn = nqn;
    o.queue_depth = kBlocks;
    o.io_deadline_ms = 2000;
    nvmeof_volume* vol = NULL;
    const char* paths[] = {addr};
    REQUIRE(nvmeof_volume_open_on(host, paths, 1, &o, &vol) == 0);
    const uint32_t bs = nvmeof_volume_block_size(vol);
    uint8_t* buf = NULL;
    REQUIRE(nvmeof_buffer_alloc((size_t)kBlocks * bs, -1, (void**)&buf) == 0);
    for (int op = 0; op < 2; ++op) {
      if (op == 0) fill(buf, (size_t)kBlocks * bs, 5);
      else memset(buf, 0, (size_t)kBlocks * bs);
      for (int i = 0; i < kBlocks; ++i) {
        uint8_t* p = buf + (size_t)i * bs;
        REQUIRE((op == 0 ? nvmeof_submit_write(vol, p, bs, (uint64_t)i * bs, (uint64_t)i)
                         : nvmeof_submit_read(vol, p, bs, (uint64_t)i * bs, (uint64_t)i)) == 0);
      }
      nvmeof_event ev[kBlocks];
      const int n = nvmeof_volume_reap_wait(vol, ev, kBlocks, kBlocks, 30000000);
      CHECK(n == kBlocks);
      for (int i = 0; i < n; ++i) CHECK(nvmeof_status_ok(ev[i].status));
    }
    CHECK(verify(buf, (size_t)kBlocks * bs, 5));
    nvmeof_host_stats hs;
    memset(&hs, 0, sizeof hs);
    hs.struct_size = sizeof hs;
    REQUIRE(nvmeof_host_stats_get(host, &hs) == 0);
    if (drive) CHECK(hs.driven_turns > 0 && hs.parks >= 1);
    else CHECK(hs.driven_turns == 0 && hs.parks == 0);
    nvmeof_event ev[4];
    CHECK(nvmeof_volume_reap_wait(vol, ev, 4, 0, 0) == -EINVAL);  /* min below 1 */
    CHECK(nvmeof_volume_reap_wait(vol, ev, 4, 5, 0) == -EINVAL);  /* min above max */
    CHECK(nvmeof_volume_reap_wait(vol, NULL, 4, 1, 0) == -EINVAL);
    CHECK(nvmeof_volume_reap_wait(NULL, ev, 4, 1, 0) == -EINVAL);
    CHECK(nvmeof_volume_reap_wait(vol, ev, 4, 1, 20000) == 0);  /* nothing in flight: the timeout */
    nvmeof_buffer_free(buf);
    CHECK(nvmeof_volume_close(vol) == 0);
    nvmeof_host_close(host);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: capi-test ADDR:PORT NQN\n");
    return 2;
  }
  test_queue_mode(argv[1], argv[2]);
  test_callback_mode(argv[1], argv[2]);
  test_bad_open(argv[2]);
  test_tls_open(argv[1], argv[2]);
  test_refused_connect(argv[1]);
  test_host(argv[1], argv[2]);
  test_reap_wait(argv[1], argv[2]);
  test_runtime_paths(argv[1], argv[2]);
  test_discovery(argv[1]);
  if (failures) {
    fprintf(stderr, "capi-test: %d checks failed\n", failures);
    return 1;
  }
  printf("capi-test: all checks passed\n");
  return 0;
}
