// nbdkit-nvmeof-plugin: serves one nvmeof volume (one namespace over several paths) over NBD.
//
//   nbdkit nvmeof path=10.0.0.1:4420 path=10.0.1.1:4420 nqn=nqn.2024-01.io.nvmeof:target
//
// Written over the public C API (nvmeof/nvmeof.h) only. Every connection shares one volume;
// requests run in parallel (one nbdkit worker thread per request in flight), each submitted with
// a waiter on its thread's stack that the completion callback (on a reactor thread) wakes.
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <nvmeof/nvmeof.h>
#include <nvmeof/version.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

namespace {

// ---- configuration (nbdkit's main thread, before any connection) ----------------------------

struct Config {
  std::vector<std::string> paths;
  std::string discovery;
  std::string nqn;
  std::string hostnqn;
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
  std::string tls_psk;
  uint32_t tls = NVMEOF_TLS_WHEN_KEYED;
  uint32_t nsid = 1;
  uint32_t queue_depth = 256;
  uint32_t reactors = 1;
  uint32_t poll = NVMEOF_POLL_ADAPTIVE;
  uint32_t selector = NVMEOF_SELECTOR_SERVICE_TIME;
  uint32_t no_path_timeout_ms = 30000;
  uint32_t kato_ms = NVMEOF_KATO_SHORTEST;
  uint32_t io_deadline_ms = 0;
};

Config g_cfg;
nvmeof_volume* g_vol = nullptr;
pid_t g_vol_pid = 0;
uint32_t g_block_size = 0;
uint64_t g_size = 0;

// The largest piece the plugin submits at once: a volume splits an I/O into at most 1024
// commands of MDTS each, so 4 MiB stays inside that even at the smallest MDTS (4 KiB). Larger
// requests go out as several pieces in flight together.
constexpr uint64_t kMaxPiece = 4u << 20;
// Write Zeroes carries no data: one piece may be much larger.
constexpr uint64_t kMaxZeroPiece = 1u << 30;
// What the plugin advertises as the largest request (NBD's customary 32 MiB).
constexpr uint32_t kMaxRequest = 32u << 20;

// ---- the library's diagnostics ---------------------------------------------------------------

// The library logs from its own threads; the last warning is kept so that a failed open can say
// why (the open returns only an errno).
std::mutex g_log_mu;
std::string g_last_warning;

void on_library_log(int level, const char* msg, void*) {
  nbdkit_debug("%s", msg);
  if (level <= NVMEOF_LOG_WARNING) {
    std::lock_guard lk(g_log_mu);
    g_last_warning = msg;
  }
}

std::string take_last_warning() {
  std::lock_guard lk(g_log_mu);
  return std::exchange(g_last_warning, {});
}

// ---- one request: submit pieces, wait for all of them ----------------------------------------

// Lives on the stack of the nbdkit thread that serves the request. Written by the completion
// callbacks (reactor threads): `first_bad` once (compare-exchange), then `remaining` with
// release; the request thread reads `first_bad` only after it saw `remaining` reach 0 (acquire).
struct Waiter {
  std::atomic<uint32_t> remaining{0};
  std::atomic<uint32_t> first_bad{0};  // 0, or the first failed piece's status | 0x10000
};

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, nullptr, nullptr, 0);
}

void on_complete(const nvmeof_event* ev, void*) {
  auto* w = reinterpret_cast<Waiter*>(static_cast<uintptr_t>(ev->cookie));
  if (!nvmeof_status_ok(ev->status)) {
    uint32_t none = 0;
    w->first_bad.compare_exchange_strong(none, 0x10000u | ev->status, std::memory_order_relaxed);
  }
  if (w->remaining.fetch_sub(1, std::memory_order_release) == 1) {
    // The waiter may already have seen 0 and returned, so `w` can be gone: the wake goes to the
    // address only (the request thread's stack, still mapped), and a stray wake of a later
    // waiter there is harmless because every waiter re-checks its own count.
    futex(&w->remaining, FUTEX_WAKE_PRIVATE, INT_MAX);
  }
}

void wait_all(Waiter& w) {
  for (uint32_t v; (v = w.remaining.load(std::memory_order_acquire)) != 0;)
    futex(&w.remaining, FUTEX_WAIT_PRIVATE, v);
}

// Submits through `submit` (a call that returns 0, -EAGAIN or another -errno), waiting for a
// free I/O slot when every one is taken (more nbdkit threads than queue_depth).
template <typename Submit>
int submit_retrying(Submit&& submit) {
  unsigned backoff_us = 10;
  for (;;) {
    const int rc = submit();
    if (rc != -EAGAIN) return rc;
    if (nbdkit_nanosleep(0, backoff_us * 1000) == -1) return -ESHUTDOWN;
    backoff_us = std::min(backoff_us * 2, 1000u);
  }
}

// The outcome of a request whose pieces were submitted: 0, or -1 with nbdkit's error set.
// `len` 0: a request without a range (flush).
int finish(Waiter& w, const char* what, uint64_t offset, uint64_t len, int submit_rc) {
  wait_all(w);
  char range[64] = "";
  if (len != 0)
    std::snprintf(range, sizeof range, " of %" PRIu64 " bytes at %" PRIu64, len, offset);
  if (submit_rc != 0) {
    nbdkit_error("nvmeof: %s%s: %s", what, range, nvmeof_strerror(submit_rc));
    nbdkit_set_error(-submit_rc);
    return -1;
  }
  const uint32_t bad = w.first_bad.load(std::memory_order_relaxed);
  if (bad == 0) return 0;
  char why[96];
  const auto st = static_cast<nvmeof_status>(bad & 0xffffu);
  nbdkit_error("nvmeof: %s%s: %s", what, range, nvmeof_status_str(st, why, sizeof why));
  // SCT 0 SC 20h: the namespace is write protected; everything else is an I/O error to a client.
  nbdkit_set_error(nvmeof_status_sct(st) == 0 && nvmeof_status_sc(st) == 0x20 ? EPERM : EIO);
  return -1;
}

bool aligned(uint64_t offset, uint64_t len, const char* what) {
  if (offset % g_block_size == 0 && len % g_block_size == 0) return true;
  nbdkit_error("nvmeof: %s of %" PRIu64 " bytes at %" PRIu64 " is not aligned to the %" PRIu32
               "-byte blocks of the namespace (add --filter=blocksize for a client that ignores "
               "the advertised block size)",
               what, len, offset, g_block_size);
  nbdkit_set_error(EINVAL);
  return false;
}

// Splits [offset, offset + len) into pieces of at most `piece` bytes, submits each with
// `submit_piece(off, n, cookie)`, and waits for all that were submitted.
template <typename SubmitPiece>
int run_pieces(const char* what, uint64_t offset, uint64_t len, uint64_t piece,
               SubmitPiece&& submit_piece) {
  Waiter w;
  const auto cookie = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&w));
  const uint64_t n = (len + piece - 1) / piece;
  // Counted in full before the first submission: a piece completing early never sees 0 while
  // more are still to be submitted.
  w.remaining.store(static_cast<uint32_t>(n), std::memory_order_relaxed);
  int rc = 0;
  uint64_t i = 0;
  for (; i < n; ++i) {
    const uint64_t off = offset + i * piece;
    const uint64_t this_len = std::min(piece, offset + len - off);
    rc = submit_retrying([&] { return submit_piece(off, this_len, cookie); });
    if (rc != 0) break;
  }
  if (i < n) w.remaining.fetch_sub(static_cast<uint32_t>(n - i), std::memory_order_release);
  return finish(w, what, offset, len, rc);
}

// ---- the plugin's callbacks -----------------------------------------------------------------

int parse_u32(const char* key, const char* value, uint32_t* out, uint32_t min, uint32_t max) {
  if (nbdkit_parse_uint32_t(key, value, out) == -1) return -1;
  if (*out < min || *out > max) {
    nbdkit_error("%s=%s: expected a number from %" PRIu32 " to %" PRIu32, key, value, min, max);
    return -1;
  }
  return 0;
}

int read_secret(const char* key, const char* value, std::string& out) {
  char* s = nullptr;
  // nbdkit's forms: the value itself, "-" (asked on the terminal), "-FD", "+FILE". The
  // library's own "@FILE" passes through as a value.
  if (nbdkit_read_password(value, &s) == -1) return -1;
  out = s ? s : "";
  std::free(s);
  if (out.empty()) {
    nbdkit_error("%s: empty", key);
    return -1;
  }
  return 0;
}

int nvmeof_config(const char* key, const char* value) {
  const std::string k = key;
  if (k == "path") {
    if (!*value) return nbdkit_error("path=: expected ADDR:PORT"), -1;
    g_cfg.paths.emplace_back(value);
  } else if (k == "discovery") {
    g_cfg.discovery = value;
  } else if (k == "nqn") {
    g_cfg.nqn = value;
  } else if (k == "hostnqn") {
    g_cfg.hostnqn = value;
  } else if (k == "nsid") {
    return parse_u32(key, value, &g_cfg.nsid, 1, 0xfffffffe);
  } else if (k == "dhchap-secret") {
    return read_secret(key, value, g_cfg.dhchap_secret);
  } else if (k == "dhchap-ctrl-secret") {
    return read_secret(key, value, g_cfg.dhchap_ctrl_secret);
  } else if (k == "tls-psk") {
    return read_secret(key, value, g_cfg.tls_psk);
  } else if (k == "tls") {
    if (std::strcmp(value, "auto") == 0) g_cfg.tls = NVMEOF_TLS_WHEN_KEYED;
    else if (std::strcmp(value, "on") == 0) g_cfg.tls = NVMEOF_TLS_ON;
    else if (std::strcmp(value, "off") == 0) g_cfg.tls = NVMEOF_TLS_OFF;
    else return nbdkit_error("tls=%s: expected auto, on or off", value), -1;
  } else if (k == "queue-depth") {
    return parse_u32(key, value, &g_cfg.queue_depth, 1, 65536);
  } else if (k == "reactors") {
    return parse_u32(key, value, &g_cfg.reactors, 1, 256);
  } else if (k == "poll") {
    if (std::strcmp(value, "adaptive") == 0) g_cfg.poll = NVMEOF_POLL_ADAPTIVE;
    else if (std::strcmp(value, "busy") == 0) g_cfg.poll = NVMEOF_POLL_BUSY;
    else if (std::strcmp(value, "sleep") == 0) g_cfg.poll = NVMEOF_POLL_SLEEP;
    else return nbdkit_error("poll=%s: expected adaptive, busy or sleep", value), -1;
  } else if (k == "selector") {
    if (std::strcmp(value, "service-time") == 0) g_cfg.selector = NVMEOF_SELECTOR_SERVICE_TIME;
    else if (std::strcmp(value, "round-robin") == 0) g_cfg.selector = NVMEOF_SELECTOR_ROUND_ROBIN;
    else if (std::strcmp(value, "queue-depth") == 0) g_cfg.selector = NVMEOF_SELECTOR_QUEUE_DEPTH;
    else if (std::strcmp(value, "numa") == 0) g_cfg.selector = NVMEOF_SELECTOR_NUMA;
    else
      return nbdkit_error("selector=%s: expected service-time, round-robin, queue-depth or numa",
                          value), -1;
  } else if (k == "no-path-timeout-ms") {
    return parse_u32(key, value, &g_cfg.no_path_timeout_ms, 0, UINT32_MAX);
  } else if (k == "kato-ms") {
    return parse_u32(key, value, &g_cfg.kato_ms, 0, UINT32_MAX - 1);
  } else if (k == "io-deadline-ms") {
    return parse_u32(key, value, &g_cfg.io_deadline_ms, 0, UINT32_MAX);
  } else {
    nbdkit_error("unknown parameter '%s' (nbdkit nvmeof --help lists them)", key);
    return -1;
  }
  return 0;
}

int nvmeof_config_complete() {
  if (g_cfg.nqn.empty()) {
    nbdkit_error("nqn=NQN is required: the subsystem NQN of the namespace to serve");
    return -1;
  }
  if (g_cfg.paths.empty() && g_cfg.discovery.empty()) {
    nbdkit_error("at least one path=ADDR:PORT (or discovery=ADDR:PORT) is required");
    return -1;
  }
  if (!g_cfg.paths.empty() && !g_cfg.discovery.empty()) {
    nbdkit_error("path= and discovery= exclude each other: give the paths, or where to find them");
    return -1;
  }
  if (!g_cfg.dhchap_ctrl_secret.empty() && g_cfg.dhchap_secret.empty()) {
    nbdkit_error("dhchap-ctrl-secret= needs dhchap-secret= too");
    return -1;
  }
  return 0;
}

// Opens the volume as configured, on an engine of its own (its reactors and poll mode are the
// plugin's parameters); 0, or -1 with nbdkit's error set.
int open_volume() {
  nvmeof_set_log_callback(on_library_log, nullptr);
  nvmeof_host_options ho;
  nvmeof_host_options_init(&ho);
  ho.reactors = g_cfg.reactors;
  ho.poll = g_cfg.poll;
  // Passthrough paths share the reactors' rings, which then need 128-byte entries.
  for (const auto& p : g_cfg.paths)
    if (p.rfind("passthrough:", 0) == 0) ho.sqe_size = NVMEOF_SQE_128;
  nvmeof_host* host = nullptr;
  if (const int rc = nvmeof_host_create(&ho, &host); rc != 0) {
    nbdkit_error("cannot start the nvmeof engine: %s", nvmeof_strerror(rc));
    return -1;
  }
  nvmeof_volume_options o;
  nvmeof_volume_options_init(&o);
  o.subnqn = g_cfg.nqn.c_str();
  o.hostnqn = g_cfg.hostnqn.empty() ? nullptr : g_cfg.hostnqn.c_str();
  o.nsid = g_cfg.nsid;
  o.queue_depth = g_cfg.queue_depth;
  o.reactors = g_cfg.reactors;
  o.selector = g_cfg.selector;
  o.no_path_timeout_ms = g_cfg.no_path_timeout_ms;
  o.kato_ms = g_cfg.kato_ms;
  o.io_deadline_ms = g_cfg.io_deadline_ms;
  o.completion_cb = on_complete;
  o.dhchap_secret = g_cfg.dhchap_secret.empty() ? nullptr : g_cfg.dhchap_secret.c_str();
  o.dhchap_ctrl_secret =
      g_cfg.dhchap_ctrl_secret.empty() ? nullptr : g_cfg.dhchap_ctrl_secret.c_str();
  o.tls_psk = g_cfg.tls_psk.empty() ? nullptr : g_cfg.tls_psk.c_str();
  o.tls = g_cfg.tls;

  take_last_warning();
  int rc;
  std::string where;
  if (!g_cfg.discovery.empty()) {
    rc = nvmeof_volume_open_discovered_on(host, g_cfg.discovery.c_str(), &o, &g_vol);
    where = "discovery=" + g_cfg.discovery;
  } else {
    std::vector<const char*> paths;
    for (const auto& p : g_cfg.paths) {
      paths.push_back(p.c_str());
      where += (where.empty() ? "path=" : " path=") + p;
    }
    rc = nvmeof_volume_open_on(host, paths.data(), paths.size(), &o, &g_vol);
  }
  // The volume holds the engine from here on; it stops when the volume closes.
  nvmeof_host_close(host);
  if (rc != 0) {
    g_vol = nullptr;
    std::string why = take_last_warning();
    if (!why.empty()) why = " (" + why + ")";
    nbdkit_error("cannot open nsid %" PRIu32 " of %s at %s: %s%s", g_cfg.nsid, g_cfg.nqn.c_str(),
                 where.c_str(), nvmeof_strerror(rc), why.c_str());
    return -1;
  }
  g_vol_pid = getpid();
  g_block_size = nvmeof_volume_block_size(g_vol);
  g_size = nvmeof_volume_size(g_vol);
  return 0;
}

void close_volume() {
  if (g_vol) nvmeof_volume_close(g_vol);
  g_vol = nullptr;
}

// The volume is opened here once, so that a bad address, NQN or key is reported while the
// user still sees nbdkit's errors, and then closed again: a volume's engine runs threads, and
// nbdkit may fork into the background after this (threads do not survive a fork).
int nvmeof_get_ready() {
  if (open_volume() == -1) return -1;
  close_volume();
  return 0;
}

// The serving process (after the fork, if nbdkit forked) opens the volume it serves.
int nvmeof_after_fork() { return open_volume(); }

void nvmeof_unload() {
  // Only the process that opened the volume may close it; a forked parent just exits.
  if (g_vol && g_vol_pid == getpid()) close_volume();
  nvmeof_set_log_callback(nullptr, nullptr);
}

void* nvmeof_open(int) {
  // One volume serves every connection: the handle is only a token.
  return g_vol;
}

int64_t nvmeof_get_size(void*) { return static_cast<int64_t>(g_size); }

int nvmeof_block_size(void*, uint32_t* minimum, uint32_t* preferred, uint32_t* maximum) {
  *minimum = g_block_size;
  *preferred = std::max<uint32_t>(g_block_size, 4096);
  *maximum = kMaxRequest;
  return 0;
}

int nvmeof_is_rotational(void*) { return 0; }
int nvmeof_can_write(void*) { return 1; }
int nvmeof_can_flush(void*) { return 1; }
int nvmeof_can_trim(void*) { return 1; }
int nvmeof_can_zero(void*) { return 1; }
// No FUA in the C API: nbdkit follows a FUA write with a flush.
int nvmeof_can_fua(void*) { return NBDKIT_FUA_EMULATE; }
// A Flush applies to the namespace whichever connection (and path) it came from.
int nvmeof_can_multi_conn(void*) { return 1; }

int nvmeof_pread(void*, void* buf, uint32_t count, uint64_t offset, uint32_t) {
  if (!aligned(offset, count, "read")) return -1;
  auto* base = static_cast<char*>(buf);
  return run_pieces("read", offset, count, kMaxPiece, [&](uint64_t off, uint64_t n, uint64_t c) {
    return nvmeof_submit_read(g_vol, base + (off - offset), n, off, c);
  });
}

int nvmeof_flush(void*, uint32_t) {
  Waiter w;
  w.remaining.store(1, std::memory_order_relaxed);
  const int rc = submit_retrying([&] {
    return nvmeof_submit_flush(g_vol, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&w)));
  });
  if (rc != 0) w.remaining.store(0, std::memory_order_relaxed);
  return finish(w, "flush", 0, 0, rc);
}

int nvmeof_pwrite(void* h, const void* buf, uint32_t count, uint64_t offset, uint32_t flags) {
  if (!aligned(offset, count, "write")) return -1;
  const auto* base = static_cast<const char*>(buf);
  int rc = run_pieces("write", offset, count, kMaxPiece, [&](uint64_t off, uint64_t n, uint64_t c) {
    return nvmeof_submit_write(g_vol, base + (off - offset), n, off, c);
  });
  if (rc == 0 && (flags & NBDKIT_FLAG_FUA)) rc = nvmeof_flush(h, 0);
  return rc;
}

int nvmeof_zero(void* h, uint32_t count, uint64_t offset, uint32_t flags) {
  if (!aligned(offset, count, "zero")) return -1;
  int rc = run_pieces("zero", offset, count, kMaxZeroPiece, [](uint64_t off, uint64_t n, uint64_t c) {
    return nvmeof_submit_write_zeroes(g_vol, n, off, c);
  });
  if (rc == 0 && (flags & NBDKIT_FLAG_FUA)) rc = nvmeof_flush(h, 0);
  return rc;
}

int nvmeof_trim(void* h, uint32_t count, uint64_t offset, uint32_t flags) {
  // A trim is advice: only the whole blocks inside the range are deallocated.
  const uint64_t first = (offset + g_block_size - 1) / g_block_size;
  const uint64_t end = (offset + count) / g_block_size;
  int rc = 0;
  if (end > first) {
    nvmeof_dsm_range range{};
    range.nlb = static_cast<uint32_t>(end - first);
    range.slba = first;
    rc = run_pieces("trim", offset, count, count, [&](uint64_t, uint64_t, uint64_t c) {
      return nvmeof_submit_dsm(g_vol, &range, 1, c);
    });
  }
  if (rc == 0 && (flags & NBDKIT_FLAG_FUA)) rc = nvmeof_flush(h, 0);
  return rc;
}

void nvmeof_dump_plugin() {
  std::printf("nvmeof_version=%s\n", NVMEOF_VERSION_STRING);
}

constexpr const char* kConfigHelp =
    "path=ADDR:PORT            (repeatable) A path to the namespace: tcp://ADDR:PORT (or\n"
    "                          ADDR:PORT), rdma://ADDR:PORT, passthrough:///dev/ngXnY.\n"
    "discovery=ADDR:PORT       Instead of path=: every path this discovery controller lists.\n"
    "nqn=NQN                   (required) The subsystem NQN.\n"
    "nsid=N                    The namespace ID (default 1).\n"
    "hostnqn=NQN               The host NQN (default: derived from a per-process host id).\n"
    "dhchap-secret=SECRET      DH-HMAC-CHAP host secret (DHHC-1:..., @FILE, +FILE, -, -FD).\n"
    "dhchap-ctrl-secret=SECRET The controller's secret: bidirectional authentication.\n"
    "tls-psk=KEY               NVMe/TCP TLS 1.3 PSK (NVMeTLSkey-1:..., @FILE, +FILE, -, -FD).\n"
    "tls=auto|on|off           TLS when keyed (auto, the default), always, or never.\n"
    "queue-depth=N             I/O slots of the volume (default 256).\n"
    "reactors=N                Reactor threads carrying the I/O (default 1).\n"
    "poll=MODE                 How they wait: adaptive (spin briefly, then sleep; default),\n"
    "                          busy (a whole CPU each) or sleep.\n"
    "selector=NAME             service-time (default), round-robin, queue-depth or numa.\n"
    "no-path-timeout-ms=MS     How long I/O waits for a usable path (default 30000).\n"
    "kato-ms=MS                Keep-alive timeout (default: the controller's shortest; 0: none).\n"
    "io-deadline-ms=MS         Per-command deadline before a path is failed (0: derived).";

nbdkit_plugin make_plugin() {
  nbdkit_plugin p{};
  p.name = "nvmeof";
  p.longname = "nvmeof: NVMe over Fabrics, one namespace over several paths";
  p.version = NVMEOF_VERSION_STRING;
  p.description = "Serves an NVMe-oF namespace reached over several paths (multipath, failover).";
  p.unload = nvmeof_unload;
  p.config = nvmeof_config;
  p.config_complete = nvmeof_config_complete;
  p.config_help = kConfigHelp;
  p.open = nvmeof_open;
  p.get_size = nvmeof_get_size;
  p.can_write = nvmeof_can_write;
  p.can_flush = nvmeof_can_flush;
  p.is_rotational = nvmeof_is_rotational;
  p.can_trim = nvmeof_can_trim;
  p.dump_plugin = nvmeof_dump_plugin;
  p.can_zero = nvmeof_can_zero;
  p.can_fua = nvmeof_can_fua;
  p.pread = nvmeof_pread;
  p.pwrite = nvmeof_pwrite;
  p.flush = nvmeof_flush;
  p.trim = nvmeof_trim;
  p.zero = nvmeof_zero;
  p.magic_config_key = "path";
  p.can_multi_conn = nvmeof_can_multi_conn;
  p.get_ready = nvmeof_get_ready;
  p.after_fork = nvmeof_after_fork;
  p.block_size = nvmeof_block_size;
  p.errno_is_preserved = 0;
  return p;
}

nbdkit_plugin plugin = make_plugin();

}  // namespace

NBDKIT_REGISTER_PLUGIN(plugin)
