// Connection set-up through librdmacm: address and route resolution, the verbs objects of one
// queue pair, and the connect exchange with its NVMe-oF RDMA private data (NVMe over Fabrics
// RDMA transport binding: request record format 0, QID, HRQSIZE, HSQSIZE; the accept carries
// CRQSIZE; a reject carries an NVMe/RDMA status).
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "transport/rdma/queue_pair.hpp"
#include "core/log.hpp"

namespace nvmeof::rdma {
namespace {

// Private data of the connect request (32 bytes) and of the accept and reject (first 4 bytes).
struct CmRequest {
  uint16_t recfmt;
  uint16_t qid;
  uint16_t hrqsize;
  uint16_t hsqsize;
  uint8_t reserved[24];
};
static_assert(sizeof(CmRequest) == 32);
struct CmReply {
  uint16_t recfmt;
  uint16_t crqsize_or_status;
};

// IB CM reject reason for a rejection the remote consumer made (with its own private data).
constexpr int kRejectConsumerDefined = 28;

const char* reject_status_text(uint16_t sts) {
  switch (sts) {
    case 1: return "invalid private data length";
    case 2: return "invalid record format";
    case 3: return "invalid queue ID";
    case 4: return "invalid host send queue size (HSQSIZE)";
    case 5: return "invalid host receive queue size (HRQSIZE)";
    case 6: return "no resources";
    case 7: return "invalid IRD";
    case 8: return "invalid ORD";
    default: return "unknown NVMe/RDMA reject status";
  }
}

std::error_code logged(const std::string& label, std::error_code ec, const std::string& why) {
  nvmeof::detail::log_warning("nvmeof: %s: %s\n", label.c_str(), why.c_str());
  return ec;
}

std::error_code errno_logged(const std::string& label, int err, const char* what) {
  return logged(label, errno_code(err), std::string(what) + ": " + std::strerror(err));
}

int left_ms(detail::Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - detail::Clock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
}

// Waits for `want` on the connection's event channel (non-blocking) until `deadline`. Any other
// event ends the wait with an error naming it. On success the caller acks *out.
std::error_code wait_event(Resources& r, rdma_cm_event_type want, detail::Clock::time_point deadline,
                           const std::string& label, const char* stage, rdma_cm_event** out) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(r.cm_channel, &ev) == 0) {
      if (ev->event == want) {
        *out = ev;
        return {};
      }
      const rdma_cm_event_type type = ev->event;
      const int st = ev->status;
      std::string why = std::string(stage) + ": " + rdma_event_str(type);
      std::error_code ec = make_error_code(Errc::connection_refused);
      if (type == RDMA_CM_EVENT_REJECTED) {
        const auto* pd = static_cast<const uint8_t*>(ev->param.conn.private_data);
        if (st == kRejectConsumerDefined && pd && ev->param.conn.private_data_len >= sizeof(CmReply)) {
          CmReply rej;
          std::memcpy(&rej, pd, sizeof rej);
          why = "connection rejected by the target: " + std::string(reject_status_text(rej.crqsize_or_status)) +
                " (NVMe/RDMA status " + std::to_string(rej.crqsize_or_status) + ")";
        } else {
          why = "connection refused (no listener, or rejected; CM reject reason " + std::to_string(st) + ")";
        }
      } else if (type == RDMA_CM_EVENT_ADDR_ERROR || type == RDMA_CM_EVENT_ROUTE_ERROR ||
                 type == RDMA_CM_EVENT_UNREACHABLE || type == RDMA_CM_EVENT_CONNECT_ERROR) {
        why += std::string(" (") + std::strerror(st < 0 ? -st : st) + ")";
        if (st == -ETIMEDOUT || st == ETIMEDOUT) ec = make_error_code(Errc::timeout);
      } else {
        ec = make_error_code(Errc::protocol_error);
        why += " (unexpected)";
      }
      rdma_ack_cm_event(ev);
      return logged(label, ec, why);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return errno_logged(label, errno, "rdma_get_cm_event");
    const int ms = left_ms(deadline);
    if (ms == 0)
      return logged(label, Errc::timeout, std::string("timed out waiting for ") + rdma_event_str(want) +
                                              " (" + stage + ")");
    pollfd p{r.cm_channel->fd, POLLIN, 0};
    if (::poll(&p, 1, ms) < 0 && errno != EINTR) return errno_logged(label, errno, "poll");
  }
}

uint32_t round_up(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

}  // namespace

Layout Layout::make(const QpConfig& cfg) noexcept {
  Layout l;
  l.depth = cfg.depth;
  l.in_capsule = cfg.qid == 0 ? 0 : cfg.in_capsule_data;
  static_assert(kLimits.max_transfer_cap % kPageSize == 0);
  l.max_transfer = kLimits.max_transfer(cfg.max_transfer);
  l.cmd_stride = round_up(kCapsuleLen + l.in_capsule, 64);
  l.cmd_off = 0;
  l.recv_off = size_t{l.cmd_stride} * l.depth;
  l.pool_off = (l.recv_off + size_t{kResponseLen} * l.depth + kPageSize - 1) / kPageSize * kPageSize;
  uint64_t want = cfg.pool_bytes ? cfg.pool_bytes : std::min<uint64_t>(uint64_t{l.depth} * (128u << 10), 64u << 20);
  want = std::max<uint64_t>(want, 2ull * l.max_transfer);
  const uint64_t pages = (want + kPageSize - 1) / kPageSize;
  l.pool_order = BuddyPool::order_for(static_cast<uint32_t>(std::min<uint64_t>(pages, 1u << 24)));
  l.total = l.pool_off + (size_t{1} << l.pool_order) * kPageSize;
  return l;
}

Resources::~Resources() {
  destroy_qp();
  if (mr) ibv_dereg_mr(mr);
  if (cq) {
    if (unacked_cq_events) ibv_ack_cq_events(cq, unacked_cq_events);
    ibv_destroy_cq(cq);
  }
  if (comp) ibv_destroy_comp_channel(comp);
  if (pd) ibv_dealloc_pd(pd);
  if (id) rdma_destroy_id(id);
  if (cm_channel) rdma_destroy_event_channel(cm_channel);
  // region_mem unmaps itself, after the MR above is gone.
}

void Resources::destroy_qp() noexcept {
  if (id && id->qp) rdma_destroy_qp(id);
}

namespace detail {

std::string make_label(const QpConfig& cfg) {
  const bool v6 = cfg.traddr.find(':') != std::string::npos;
  std::string s = "rdma ";
  s += v6 ? "[" + cfg.traddr + "]" : cfg.traddr;
  s += ":" + cfg.trsvcid + " qid " + std::to_string(cfg.qid);
  return s;
}

Result<void> resolve_and_create(Resources& r, const QpConfig& cfg, const Layout& l,
                                Clock::time_point deadline, const std::string& label) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
  addrinfo* ai = nullptr;
  if (const int g = ::getaddrinfo(cfg.traddr.c_str(), cfg.trsvcid.c_str(), &hints, &ai); g != 0)
    return logged(label, Errc::invalid_argument, std::string("invalid address: ") + gai_strerror(g));
  sockaddr_storage dst{};
  std::memcpy(&dst, ai->ai_addr, ai->ai_addrlen);
  ::freeaddrinfo(ai);

  r.cm_channel = rdma_create_event_channel();
  if (!r.cm_channel) {
    const int e = errno;
    // No /dev/infiniband/rdma_cm: no RDMA stack on this machine.
    return logged(label, e == ENOENT || e == ENODEV ? make_error_code(Errc::unsupported) : errno_code(e),
                  std::string("rdma_create_event_channel: ") + std::strerror(e));
  }
  const int fl = ::fcntl(r.cm_channel->fd, F_GETFL);
  if (fl < 0 || ::fcntl(r.cm_channel->fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return errno_logged(label, errno, "fcntl on the rdma_cm channel");
  if (rdma_create_id(r.cm_channel, &r.id, nullptr, RDMA_PS_TCP) != 0)
    return errno_logged(label, errno, "rdma_create_id");

  rdma_cm_event* ev = nullptr;
  if (rdma_resolve_addr(r.id, nullptr, reinterpret_cast<sockaddr*>(&dst), std::max(left_ms(deadline), 1)) != 0)
    return logged(label, Errc::connection_refused,
                  std::string("rdma_resolve_addr: ") + std::strerror(errno) + " (no RDMA device reaches this address?)");
  if (auto ec = wait_event(r, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, label, "address resolution", &ev)) return ec;
  rdma_ack_cm_event(ev);
  if (rdma_resolve_route(r.id, std::max(left_ms(deadline), 1)) != 0)
    return logged(label, Errc::connection_refused, std::string("rdma_resolve_route: ") + std::strerror(errno));
  if (auto ec = wait_event(r, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, label, "route resolution", &ev)) return ec;
  rdma_ack_cm_event(ev);

  ibv_context* ctx = r.id->verbs;
  if (!ctx) return logged(label, Errc::connection_refused, "the resolved route names no RDMA device");
  r.pd = ibv_alloc_pd(ctx);
  if (!r.pd) return errno_logged(label, errno, "ibv_alloc_pd");
  r.comp = ibv_create_comp_channel(ctx);
  if (!r.comp) return errno_logged(label, errno, "ibv_create_comp_channel");
  const int cfl = ::fcntl(r.comp->fd, F_GETFL);
  if (cfl < 0 || ::fcntl(r.comp->fd, F_SETFL, cfl | O_NONBLOCK) < 0)
    return errno_logged(label, errno, "fcntl on the completion channel");
  // Every slot has at most one SEND and one RECV posted.
  r.cq = ibv_create_cq(ctx, static_cast<int>(2 * l.depth + 2), nullptr, r.comp, 0);
  if (!r.cq) return errno_logged(label, errno, "ibv_create_cq");

  ibv_qp_init_attr qa{};
  qa.send_cq = r.cq;
  qa.recv_cq = r.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = l.depth + 1;
  qa.cap.max_recv_wr = l.depth;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.sq_sig_all = 0;
  if (rdma_create_qp(r.id, r.pd, &qa) != 0) return errno_logged(label, errno, "rdma_create_qp");

  // On the memory node of the thread that creates the pair: a lane's reactor, pinned to its
  // node, so the device's DMA and the copies land in node-local memory.
  try {
    r.region_mem = nvmeof::detail::NodeBuffer(l.total, nvmeof::detail::thread_memory_node());
  } catch (const std::bad_alloc&) {
    return errno_logged(label, ENOMEM, "mmap of the registered region");
  }
  r.region = static_cast<uint8_t*>(r.region_mem.data());
  r.region_len = l.total;
  r.mr = ibv_reg_mr(r.pd, r.region, r.region_len,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  if (!r.mr) {
    const int e = errno;
    return logged(label, errno_code(e), "ibv_reg_mr of " + std::to_string(r.region_len >> 10) +
                                            " KiB: " + std::strerror(e) + " (RLIMIT_MEMLOCK too low?)");
  }
  return {};
}

Result<uint16_t> establish(Resources& r, const QpConfig& cfg, Clock::time_point deadline,
                           const std::string& label) {
  ibv_device_attr attr{};
  if (ibv_query_device(r.id->verbs, &attr) != 0) return errno_logged(label, errno, "ibv_query_device");
  CmRequest req{};
  req.recfmt = 0;
  req.qid = cfg.qid;
  req.hrqsize = static_cast<uint16_t>(cfg.depth);      // RECVs we post for responses
  req.hsqsize = static_cast<uint16_t>(cfg.depth - 1);  // 0's based, as SQSIZE in Connect
  rdma_conn_param p{};
  p.private_data = &req;
  p.private_data_len = sizeof req;
  // The target reads write data from us: it needs RDMA READ credits at our end. We issue no
  // reads ourselves.
  p.responder_resources = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 1, 255));
  p.initiator_depth = 0;
  p.flow_control = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  if (rdma_connect(r.id, &p) != 0) return errno_logged(label, errno, "rdma_connect");
  rdma_cm_event* ev = nullptr;
  if (auto ec = wait_event(r, RDMA_CM_EVENT_ESTABLISHED, deadline, label, "connect", &ev)) return ec;
  uint16_t crqsize = static_cast<uint16_t>(cfg.depth);
  const auto* pd = static_cast<const uint8_t*>(ev->param.conn.private_data);
  if (pd && ev->param.conn.private_data_len >= sizeof(CmReply)) {
    CmReply rep;
    std::memcpy(&rep, pd, sizeof rep);
    if (rep.recfmt != 0) {
      rdma_ack_cm_event(ev);
      return logged(label, Errc::protocol_error, "accept private data has record format " + std::to_string(rep.recfmt));
    }
    if (rep.crqsize_or_status != 0) crqsize = rep.crqsize_or_status;
  }
  rdma_ack_cm_event(ev);
  return crqsize;
}

}  // namespace detail
}  // namespace nvmeof::rdma
