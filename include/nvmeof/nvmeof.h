/* The C API of the nvmeof host library: for C programs and for FFI (Python, Rust, Go).
 *
 * Conventions:
 *  - Handles are opaque (nvmeof_volume, nvmeof_host). Functions return 0 (or a count) on
 *    success and a negative errno on failure: -EINVAL a bad argument, -EAGAIN no free I/O slot
 *    (reap or wait for completions, then retry), -ECHILD a volume or host used in a process
 *    forked after it was made, -ENOMEM, -ETIMEDOUT, -ECONNREFUSED, ... (nvmeof_strerror()
 *    names them). An errno is coarse (every authentication and TLS refusal is -EACCES, a
 *    Connect the controller refused is -EIO): nvmeof_last_error() gives the reason in words and
 *    nvmeof_last_error_status() the controller's NVMe status.
 *  - Offsets and lengths are in bytes and must be multiples of the volume's block size.
 *  - An I/O's outcome is an NVMe status as a value (nvmeof_status): 0 is success; a failed
 *    transport after every retry gives the host pathing error (SCT 3h, SC 70h, DNR).
 *  - Two completion modes, chosen at open: a callback run on a reactor thread (keep it short,
 *    it may submit more I/O), or a completion queue the caller drains from its own thread with
 *    nvmeof_volume_reap(), whose eventfd (nvmeof_volume_event_fd()) is readable while
 *    completions wait. Each volume has a fixed number of I/O slots (queue_depth); the
 *    completion queue holds as many, so it never overflows and nothing is allocated per I/O.
 *  - Buffers stay owned by the caller and must stay valid until the I/O completes.
 *  - The engine (nvmeof_host): the reactor threads that carry I/O, one control thread and a
 *    small pool for blocking work. nvmeof_volume_open() runs the volume on the process's shared
 *    engine for its `reactors` (made on first use, stopped when its last volume closes);
 *    nvmeof_host_create() makes one the caller chooses, and nvmeof_volume_open_on() opens a
 *    volume on it. Either way a volume starts no thread of its own.
 *  - fork: a volume or host belongs to the process that made it. In a child every call on it
 *    returns -ECHILD (close only forgets the handle there); make new ones in the child.
 *
 * Threading: submit from any thread; reap from one thread at a time; close once, from any
 * thread but a reactor's (not from inside a completion callback).
 */
#ifndef NVMEOF_NVMEOF_H
#define NVMEOF_NVMEOF_H

#include <stddef.h>
#include <stdint.h>

#ifndef NVMEOF_API
#define NVMEOF_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nvmeof_volume nvmeof_volume;
typedef struct nvmeof_host nvmeof_host;

/* The NVMe completion status without the phase bit: bits 7:0 SC, 10:8 SCT, 12:11 CRD,
 * 13 More, 14 DNR. 0 is success. */
typedef uint16_t nvmeof_status;

static inline unsigned nvmeof_status_sc(nvmeof_status s) { return s & 0xffu; }
static inline unsigned nvmeof_status_sct(nvmeof_status s) { return (s >> 8) & 0x7u; }
static inline int nvmeof_status_dnr(nvmeof_status s) { return (s >> 14) & 1u; }
static inline int nvmeof_status_ok(nvmeof_status s) { return (s & 0x7ffu) == 0; }

/* One finished I/O. */
typedef struct nvmeof_event {
  uint64_t cookie;       /* the caller's value given at submit */
  nvmeof_status status;  /* 0: success */
  uint8_t op;            /* enum nvmeof_op */
  uint8_t reserved[5];
} nvmeof_event;

enum nvmeof_op {
  NVMEOF_OP_READ = 0,
  NVMEOF_OP_WRITE = 1,
  NVMEOF_OP_FLUSH = 2,
  NVMEOF_OP_WRITE_ZEROES = 3,
  NVMEOF_OP_DSM = 4,
};

/* Callback completion mode: runs on a reactor thread. */
typedef void (*nvmeof_completion_cb)(const nvmeof_event* ev, void* ctx);

enum nvmeof_selector {
  NVMEOF_SELECTOR_SERVICE_TIME = 0, /* the default */
  NVMEOF_SELECTOR_ROUND_ROBIN = 1,
  NVMEOF_SELECTOR_QUEUE_DEPTH = 2,
  NVMEOF_SELECTOR_NUMA = 3,
};

/* Options of nvmeof_volume_open(). Fill with nvmeof_volume_options_init() first, so fields
 * added later get their defaults. */
typedef struct nvmeof_volume_options {
  uint32_t struct_size;         /* sizeof(nvmeof_volume_options), set by _init */
  const char* subnqn;           /* required: the subsystem NQN */
  const char* hostnqn;          /* NULL: derived from a per-process host id */
  uint32_t nsid;                /* default 1 */
  uint32_t queue_depth;         /* I/O slots of the volume (1..65536), default 256 */
  uint32_t reactors;            /* data-plane threads, default 1 */
  uint32_t selector;            /* enum nvmeof_selector */
  uint32_t no_path_timeout_ms;  /* how long an I/O waits for a usable path, default 30000 */
  /* Keep-alive timeout, ms, rounded up to the controller's granularity; 0: none. Default
   * NVMEOF_KATO_SHORTEST, the shortest the controller allows (100 ms on the embedded target),
   * as in C++ and Python: KATO bounds how soon a silent path is detected and how long its
   * writes wait to be fenced (2 x KATO + CQT). A host too loaded to answer within it has its
   * path failed and reconnected (no I/O lost); such a host may ask for more, e.g. 5000, and
   * its writes then wait seconds across a partition without CCR. */
  uint32_t kato_ms;
  uint32_t io_deadline_ms;      /* per-command deadline before a path is failed; 0: derived from
                                   the path's latency (at most 25 ms) */
  nvmeof_completion_cb completion_cb; /* NULL: completion-queue mode */
  void* completion_ctx;
  /* DH-HMAC-CHAP: the host's secret as `nvme gen-dhchap-key` prints it ("DHHC-1:0X:...:") or
   * "@PATH" of a file holding one; NULL: no authentication. Every queue of every path
   * authenticates, again on each reconnect. A wrong key fails the open with -EACCES. */
  const char* dhchap_secret;
  /* The controller's secret (same forms) for bidirectional authentication; NULL: none. */
  const char* dhchap_ctrl_secret;
  /* NVMe/TCP TLS 1.3 with a pre-shared key: the configured PSK as `nvme gen-tls-key` prints it
   * ("NVMeTLSkey-1:0X:...:") or "@PATH" of a file holding one; NULL: plaintext. Every queue of
   * every TCP path runs its handshake before the ICReq, again on each reconnect. A refused key
   * fails the open with -EACCES (so does a plaintext open of a port that requires TLS); a port
   * that does not offer TLS, with -EPROTONOSUPPORT; a malformed key, with -EINVAL. */
  const char* tls_psk;
  uint32_t tls;                 /* enum nvmeof_tls, default NVMEOF_TLS_WHEN_KEYED */
} nvmeof_volume_options;

enum nvmeof_tls {
  NVMEOF_TLS_WHEN_KEYED = 0, /* TLS exactly when tls_psk is set */
  NVMEOF_TLS_OFF = 1,        /* never, even with a key */
  NVMEOF_TLS_ON = 2,         /* always: without tls_psk the open fails with -EINVAL */
};

#define NVMEOF_KATO_SHORTEST 0xffffffffu

NVMEOF_API void nvmeof_volume_options_init(nvmeof_volume_options* opts);

/* Opens one namespace over `npaths` addresses ("127.0.0.1:4420", "tcp://[::1]:4420",
 * "rdma://10.0.0.1:4420"): every path is connected and checked to reach the same namespace.
 * A path unreachable at open is retried in the background; open fails only when none opens. */
NVMEOF_API int nvmeof_volume_open(const char* const* paths, size_t npaths,
                                  const nvmeof_volume_options* opts, nvmeof_volume** out);
/* Opens every path a discovery controller at `discovery_addr` lists for opts->subnqn. */
NVMEOF_API int nvmeof_volume_open_discovered(const char* discovery_addr,
                                             const nvmeof_volume_options* opts,
                                             nvmeof_volume** out);
/* Waits for in-flight I/O (bounded by no_path_timeout), then tears the volume down. Events not
 * reaped are dropped. */
NVMEOF_API int nvmeof_volume_close(nvmeof_volume* vol);

/* ---- The engine -------------------------------------------------------------------------- */

/* How the engine's reactor threads wait for completions. */
enum nvmeof_poll {
  NVMEOF_POLL_ADAPTIVE = 0, /* spin briefly after an event while I/O is outstanding, then sleep;
                               an idle engine costs no CPU (the default) */
  NVMEOF_POLL_BUSY = 1,     /* never sleep: the lowest latency, a whole CPU per reactor */
  NVMEOF_POLL_SLEEP = 2,    /* sleep whenever a turn found nothing to do */
};

enum nvmeof_placement {
  NVMEOF_PLACEMENT_NUMA = 0,     /* reactors pinned (to `cpus`, else spread over the nodes), their
                                    memory on their node, paths chosen knowing the distance */
  NVMEOF_PLACEMENT_UNPINNED = 1, /* none of that */
};

/* The size of the submission entries of every reactor's io_uring. */
enum nvmeof_sqe_size {
  NVMEOF_SQE_64 = 0,  /* the default */
  NVMEOF_SQE_128 = 1, /* needed by io_uring passthrough paths ("passthrough:///dev/ngXnY"), which
                         share the reactors' rings */
};

/* Options of nvmeof_host_create(). Fill with nvmeof_host_options_init() first, so fields added
 * later get their defaults. */
typedef struct nvmeof_host_options {
  uint32_t struct_size; /* sizeof(nvmeof_host_options), set by _init */
  uint32_t reactors;    /* reactor threads (1..256), fixed for the engine's life; default 1 */
  uint32_t poll;        /* enum nvmeof_poll, default NVMEOF_POLL_ADAPTIVE */
  uint32_t placement;   /* enum nvmeof_placement, default NVMEOF_PLACEMENT_NUMA */
  /* NUMA placement: reactor i is pinned to cpus[i % ncpus]. NULL (ncpus 0): CPUs chosen with
   * the nodes interleaved. Read during nvmeof_host_create() only. */
  const int* cpus;
  size_t ncpus;
  uint32_t sqe_size;    /* enum nvmeof_sqe_size, default NVMEOF_SQE_64 */
  /* "ADDR:PORT" (port 0 picks one): serve the engine's Prometheus metrics over HTTP at /metrics
   * (nvmeof_host_*, and nvmeof_controller_* once per controller). NULL (default): none. Read
   * during nvmeof_host_create() only. */
  const char* metrics_listen;
  /* Non-zero: a thread waiting in nvmeof_volume_reap_wait() runs the turns of its volume's
   * reactor itself while the reactor's thread sleeps (it takes the reactor back once no caller
   * has driven it for a millisecond). For a thread that reaps and submits in batches: no
   * hand-over between threads per batch, one busy thread fewer. Default 0. */
  uint32_t caller_drive;
} nvmeof_host_options;

NVMEOF_API void nvmeof_host_options_init(nvmeof_host_options* opts);

/* Starts an engine: its reactor threads (placed as `opts` says), its control thread and its
 * pool. The caller holds one reference, given back with nvmeof_host_close(); each volume opened
 * on it holds another. Any thread. -EINVAL for bad options (reactors 0 or above 256, an unknown
 * enum value, a negative CPU, cpus NULL with ncpus not 0, a struct_size smaller than this
 * header's, a metrics_listen that is not ADDR:PORT); -EADDRINUSE when metrics_listen cannot be
 * bound; -EOPNOTSUPP for a metrics_listen when the library was built without metrics support;
 * io_uring's errno when it is unavailable (-ENOSYS, -EPERM, -ENOMEM); -EAGAIN when a
 * thread cannot be started. A CPU that does not exist or is not allowed leaves its reactor
 * unpinned (logged). */
NVMEOF_API int nvmeof_host_create(const nvmeof_host_options* opts, nvmeof_host** out);
/* The TCP port of the host's metrics endpoint (nvmeof_host_options.metrics_listen), 0 when it
 * has none; -EINVAL for NULL. Any thread. */
NVMEOF_API int nvmeof_host_metrics_port(const nvmeof_host* h);
/* Gives back the caller's reference. Volumes opened on the host keep it running; its threads
 * stop when the last of them closes (or now, when none is open). Any thread but a reactor's (not
 * from inside a completion callback). In a forked child it only forgets the handle. -EINVAL for
 * NULL. */
NVMEOF_API int nvmeof_host_close(nvmeof_host* host);

/* What an engine runs and costs right now (counted, not timed). */
typedef struct nvmeof_host_stats {
  uint32_t struct_size;     /* set by the caller to sizeof(nvmeof_host_stats) */
  uint32_t reactors;        /* reactor threads */
  uint32_t threads;         /* every thread of the engine: reactors, control thread, pool */
  uint32_t volumes;         /* volumes open on it */
  uint64_t reactor_cpu_ns;  /* CPU time all its reactor threads have used */
  uint64_t reactor_wakeups; /* times its reactor threads came back from a wait in their ring */
  uint32_t subsystems;      /* subsystems its volumes are open on (each over its own paths) */
  uint32_t controllers;     /* their controllers: one per path, shared by the volumes on it */
  uint64_t driven_turns;    /* caller_drive: reactor turns run by callers' threads */
  uint64_t parks;           /* caller_drive: times a reactor thread parked for a caller */
} nvmeof_host_stats;

/* Fills `stats` (its struct_size set first). Any thread. -EINVAL for NULL or a struct_size
 * smaller than this header's, -ECHILD in a forked child. */
NVMEOF_API int nvmeof_host_stats_get(const nvmeof_host* host, nvmeof_host_stats* stats);

/* Persistent discovery (C++: Host::add_discovery): the host keeps a connection to the discovery
 * controller at `addr`, reads its log at each connect and each change event, and applies it to
 * its open volumes: a port listed for a volume's subsystem becomes a path, one no longer listed
 * is removed. `opts` gives the host NQN, keys and TLS of the discovery connection (its subnqn and
 * the rest are not used); NULL: the defaults. Returns at once (it connects in the background).
 * -EEXIST watched already, -EINVAL a bad address or options; nvmeof_last_error() says why.
 * nvmeof_host_remove_discovery stops watching it (-ENOENT when not watched). */
NVMEOF_API int nvmeof_host_add_discovery(nvmeof_host* host, const char* addr, const nvmeof_volume_options* opts);
NVMEOF_API int nvmeof_host_remove_discovery(nvmeof_host* host, const char* addr);
/* The namespace changes the host's controllers reported since the last call (added, resized,
 * removed; C++: Host::take_namespace_events), as a JSON array of objects {"kind", "subnqn",
 * "nsid", "size_blocks", "block_size"}; *out is freed with nvmeof_string_free(). And its
 * persistent discovery controllers as a JSON array ({"address", "connected", "log_reads",
 * "change_events", "reconnects", "genctr", "entries", "last_error"}). */
NVMEOF_API int nvmeof_host_namespace_events_json(nvmeof_host* host, char** out);
NVMEOF_API int nvmeof_host_discovery_json(const nvmeof_host* host, char** out);

/* As nvmeof_volume_open(), on `host`: the volume's I/O runs on its reactors and the volume holds
 * it until closed. opts->reactors is not used (the host's own options hold). Any thread but a
 * reactor's. Errors as nvmeof_volume_open(), and -EINVAL for a NULL host or a passthrough path
 * on a host made without NVMEOF_SQE_128, -ECHILD for a host made before a fork. */
NVMEOF_API int nvmeof_volume_open_on(nvmeof_host* host, const char* const* paths, size_t npaths,
                                     const nvmeof_volume_options* opts, nvmeof_volume** out);
/* As nvmeof_volume_open_discovered(), on `host` (see nvmeof_volume_open_on()). */
NVMEOF_API int nvmeof_volume_open_discovered_on(nvmeof_host* host, const char* discovery_addr,
                                                const nvmeof_volume_options* opts,
                                                nvmeof_volume** out);

/* Paths at run time (C++: Volume::add_path, remove_path). nvmeof_volume_add_path returns the new
 * path's index (>= 0) at once; the path connects in the background and takes I/O once live.
 * -EEXIST already a path, -EBUSY being removed, -ENOSPC too many paths over the volume's life,
 * -EINVAL a bad address. nvmeof_volume_remove_path returns once the path is gone: no new I/O,
 * its commands completed (or moved after their fence if it failed), its controller closed;
 * -ENOENT not a path, -ETIMEDOUT not gone in time (it goes on being removed). Both act on the
 * subsystem's shared controllers: every volume open on them gains or loses the path. Neither
 * may be called from a completion (-EDEADLK). nvmeof_last_error() says why. */
NVMEOF_API int nvmeof_volume_add_path(nvmeof_volume* vol, const char* addr);
NVMEOF_API int nvmeof_volume_remove_path(nvmeof_volume* vol, const char* addr);

NVMEOF_API uint32_t nvmeof_volume_block_size(const nvmeof_volume* vol);
NVMEOF_API uint64_t nvmeof_volume_size(const nvmeof_volume* vol); /* bytes */
NVMEOF_API uint32_t nvmeof_volume_queue_depth(const nvmeof_volume* vol);

/* Asynchronous I/O. Each takes one slot until its completion is delivered (the callback has
 * returned, or the event was reaped). */
NVMEOF_API int nvmeof_submit_read(nvmeof_volume* vol, void* buf, size_t len, uint64_t offset,
                                  uint64_t cookie);
NVMEOF_API int nvmeof_submit_write(nvmeof_volume* vol, const void* buf, size_t len,
                                   uint64_t offset, uint64_t cookie);
NVMEOF_API int nvmeof_submit_flush(nvmeof_volume* vol, uint64_t cookie);
NVMEOF_API int nvmeof_submit_write_zeroes(nvmeof_volume* vol, size_t len, uint64_t offset,
                                          uint64_t cookie);

/* A Dataset Management range (the NVMe layout, little-endian host assumed). */
typedef struct nvmeof_dsm_range {
  uint32_t attributes; /* context attributes */
  uint32_t nlb;        /* blocks */
  uint64_t slba;       /* first block */
} nvmeof_dsm_range;
/* Dataset Management with the Deallocate attribute (trim) over `ranges` (1..256 of them, each
 * inside the namespace), which must stay valid until completion. */
NVMEOF_API int nvmeof_submit_dsm(nvmeof_volume* vol, const nvmeof_dsm_range* ranges,
                                 uint32_t nranges, uint64_t cookie);

/* Completion-queue mode: moves up to `max` finished I/Os into `events`, returns how many (0:
 * none waiting; never blocks). -EINVAL in callback mode. */
NVMEOF_API int nvmeof_volume_reap(nvmeof_volume* vol, nvmeof_event* events, int max);
/* Completion-queue mode: as nvmeof_volume_reap(), but when fewer than `min` (1..max) have
 * finished, first waits up to `timeout_us` (negative: no limit) for `min` to finish. On a host
 * made with caller_drive the calling thread runs the volume's reactor meanwhile, spinning;
 * otherwise (or while another thread drives it) it sleeps on the volume's eventfd. Returns how
 * many it moved (fewer than `min` only at the timeout). -EINVAL in callback mode or for a bad
 * `min`; not from a reactor thread (a completion callback): -EDEADLK. */
NVMEOF_API int nvmeof_volume_reap_wait(nvmeof_volume* vol, nvmeof_event* events, int max, int min,
                                       int64_t timeout_us);
/* An eventfd (non-blocking) readable while completions wait to be reaped; reap clears it.
 * Owned by the volume. -EINVAL in callback mode. */
NVMEOF_API int nvmeof_volume_event_fd(const nvmeof_volume* vol);

/* Blocking forms (either mode; they do not pass through the completion queue). 0 or -errno;
 * *status gets the NVMe status (may be NULL; a nonzero status then returns -EIO). */
NVMEOF_API int nvmeof_read(nvmeof_volume* vol, void* buf, size_t len, uint64_t offset,
                           nvmeof_status* status);
NVMEOF_API int nvmeof_write(nvmeof_volume* vol, const void* buf, size_t len, uint64_t offset,
                            nvmeof_status* status);
NVMEOF_API int nvmeof_flush(nvmeof_volume* vol, nvmeof_status* status);

/* The volume's statistics (paths, states, latency, failover timeline) as JSON. *out is
 * malloc'd; free it with nvmeof_string_free(). */
NVMEOF_API int nvmeof_volume_stats_json(const nvmeof_volume* vol, char** out);
NVMEOF_API void nvmeof_string_free(char* s);

/* `nbytes` zeroed bytes, page aligned, on NUMA node `node` (-1: where the caller runs). Free
 * with nvmeof_buffer_free(). */
NVMEOF_API int nvmeof_buffer_alloc(size_t nbytes, int node, void** out);
NVMEOF_API void nvmeof_buffer_free(void* buf);

/* The library's diagnostics (path failures, reconnects, ...). NULL restores the default, a
 * line on stderr. The callback may run on any library thread; `msg` has no newline. */
enum nvmeof_log_level { NVMEOF_LOG_ERROR = 3, NVMEOF_LOG_WARNING = 4, NVMEOF_LOG_INFO = 6 };
typedef void (*nvmeof_log_cb)(int level, const char* msg, void* ctx);
NVMEOF_API void nvmeof_set_log_callback(nvmeof_log_cb cb, void* ctx);

/* The reason for the last call on this thread that failed, in words: e.g. "authentication
 * failed", "the port requires TLS but no TLS PSK is configured", or an NVMe status with its
 * meaning ("NVMe status command-specific/... : host not allowed: ..."). "" before any failure.
 * Calls that succeed leave it as it was (like errno); valid until this thread's next call. */
NVMEOF_API const char* nvmeof_last_error(void);
/* The NVMe status a controller answered the last failed call on this thread with (e.g. the
 * Connect status of a host the subsystem does not allow); 0 when that failure was no NVMe
 * status (a timeout, a refused connection, a bad argument). */
NVMEOF_API nvmeof_status nvmeof_last_error_status(void);

/* "Invalid argument" for -EINVAL etc.; a short name of an NVMe status for nvmeof_status_str. */
NVMEOF_API const char* nvmeof_strerror(int err);
/* Writes e.g. "generic/lba-out-of-range (0x4080, dnr)" into buf; returns buf. */
NVMEOF_API const char* nvmeof_status_str(nvmeof_status s, char* buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* NVMEOF_NVMEOF_H */
