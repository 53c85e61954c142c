// nvmeof._core: the thin layer between Python and the C API (include/nvmeof/nvmeof.h). The
// Pythonic surface (Volume, Future, asyncio, exceptions) is nvmeof/__init__.py.
//
// Every call that may wait on a library thread (open, close, the blocking reads and writes,
// stats) releases the GIL: a library thread may be logging, and the log handler needs the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "nvmeof/nvmeof.h"

namespace py = pybind11;

namespace {

[[noreturn]] void raise_errno(int rc, const std::string& what) {
  const int e = rc < 0 ? -rc : rc;
  std::string msg = what + ": " + nvmeof_strerror(rc);
  if (e == ECHILD)
    msg = what + ": this volume was opened by another process (the parent of a fork); open a "
                 "new nvmeof.Volume in this process (e.g. in a DataLoader worker_init_fn)";
  if (e == EINVAL) throw py::value_error(msg);
  PyErr_SetObject(PyExc_OSError, py::make_tuple(e, msg).ptr());
  throw py::error_already_set();
}

// A contiguous byte view of any buffer-protocol object, exported while this lives (a
// bytearray cannot be resized meanwhile). For asynchronous I/O the caller (nvmeof/__init__.py)
// holds a memoryview of the object until the I/O completes, which keeps it exported then.
class Bytes {
 public:
  Bytes(const py::handle& b, bool writable) {
    const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(b.ptr(), &v_, flags) != 0) throw py::error_already_set();
    ptr = static_cast<char*>(v_.buf);
    len = static_cast<size_t>(v_.len);
  }
  ~Bytes() { PyBuffer_Release(&v_); }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  char* ptr;
  size_t len;

 private:
  Py_buffer v_;
};

// The caller's reference to an engine (nvmeof_host). Volumes opened on it hold their own, so
// close() may come first.
class PyHost {
 public:
  PyHost(uint32_t reactors, uint32_t poll, uint32_t placement, const std::optional<std::vector<int>>& cpus,
         const std::string& metrics_listen, bool caller_drive) {
    nvmeof_host_options o;
    nvmeof_host_options_init(&o);
    o.reactors = reactors;
    o.caller_drive = caller_drive ? 1 : 0;
    o.poll = poll;
    o.placement = placement;
    if (!metrics_listen.empty()) o.metrics_listen = metrics_listen.c_str();
    if (cpus && !cpus->empty()) {
      o.cpus = cpus->data();
      o.ncpus = cpus->size();
    }
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = nvmeof_host_create(&o, &host_);
    }
    if (rc != 0) raise_errno(rc, "nvmeof: cannot start the host");
  }
  ~PyHost() { close(); }
  PyHost(const PyHost&) = delete;
  PyHost& operator=(const PyHost&) = delete;

  // Stops the engine when no volume holds it (joins its threads): without the GIL.
  void close() {
    if (!host_) return;
    nvmeof_host* h = host_;
    host_ = nullptr;
    py::gil_scoped_release nogil;
    nvmeof_host_close(h);
  }

  nvmeof_host* get() const {
    if (!host_) throw py::value_error("nvmeof: the Host is closed");
    return host_;
  }

  int metrics_port() const { return nvmeof_host_metrics_port(get()); }

  py::dict stats() const {
    nvmeof_host_stats s{};
    s.struct_size = sizeof s;
    const int rc = nvmeof_host_stats_get(get(), &s);
    if (rc) raise_errno(rc, "nvmeof: host stats");
    py::dict d;
    d["reactors"] = s.reactors;
    d["threads"] = s.threads;
    d["volumes"] = s.volumes;
    d["reactor_cpu_ns"] = s.reactor_cpu_ns;
    d["reactor_wakeups"] = s.reactor_wakeups;
    d["driven_turns"] = s.driven_turns;
    d["parks"] = s.parks;
    d["subsystems"] = s.subsystems;
    d["controllers"] = s.controllers;
    return d;
  }

  // Persistent discovery; the errno's text is the C API's reason (nvmeof_last_error).
  void add_discovery(const std::string& addr, const std::string& hostnqn) {
    nvmeof_volume_options o;
    nvmeof_volume_options_init(&o);
    if (!hostnqn.empty()) o.hostnqn = hostnqn.c_str();
    nvmeof_host* h = get();
    int rc;
    std::string why;
    {
      py::gil_scoped_release nogil;
      rc = nvmeof_host_add_discovery(h, addr.c_str(), &o);
      if (rc < 0) why = nvmeof_last_error();
    }
    if (rc < 0) raise_errno(rc, "nvmeof: add_discovery " + addr + (why.empty() ? "" : " (" + why + ")"));
  }
  void remove_discovery(const std::string& addr) {
    nvmeof_host* h = get();
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = nvmeof_host_remove_discovery(h, addr.c_str());
    }
    if (rc < 0) raise_errno(rc, "nvmeof: remove_discovery " + addr);
  }
  // JSON texts (parsed by nvmeof/__init__.py).
  std::string namespace_events_json() { return take_json(nvmeof_host_namespace_events_json); }
  std::string discovery_json() {
    return take_json([](nvmeof_host* h, char** out) { return nvmeof_host_discovery_json(h, out); });
  }

 private:
  template <class F>
  std::string take_json(F fn) {
    char* s = nullptr;
    const int rc = fn(get(), &s);
    if (rc) raise_errno(rc, "nvmeof: host");
    std::string out(s);
    nvmeof_string_free(s);
    return out;
  }
  nvmeof_host* host_ = nullptr;
};

class PyVolume {
 public:
  PyVolume(const std::vector<std::string>& paths, const std::string& nqn, uint32_t nsid,
           uint32_t queue_depth, uint32_t reactors, uint32_t no_path_timeout_ms,
           uint32_t kato_ms, uint32_t io_deadline_ms, const std::string& discovery,
           const std::string& hostnqn, const std::string& dhchap_secret,
           const std::string& dhchap_ctrl_secret, const std::string& tls_psk, const PyHost* host) {
    nvmeof_host* h = host ? host->get() : nullptr;
    nvmeof_volume_options o;
    nvmeof_volume_options_init(&o);
    o.subnqn = nqn.c_str();
    if (!hostnqn.empty()) o.hostnqn = hostnqn.c_str();
    if (!dhchap_secret.empty()) o.dhchap_secret = dhchap_secret.c_str();
    if (!dhchap_ctrl_secret.empty()) o.dhchap_ctrl_secret = dhchap_ctrl_secret.c_str();
    if (!tls_psk.empty()) o.tls_psk = tls_psk.c_str();
    o.nsid = nsid;
    o.queue_depth = queue_depth;
    o.reactors = reactors;
    o.no_path_timeout_ms = no_path_timeout_ms;
    o.kato_ms = kato_ms;
    o.io_deadline_ms = io_deadline_ms;
    std::vector<const char*> p;
    for (const auto& s : paths) p.push_back(s.c_str());
    int rc;
    {
      py::gil_scoped_release nogil;
      if (h)
        rc = discovery.empty() ? nvmeof_volume_open_on(h, p.data(), p.size(), &o, &vol_)
                               : nvmeof_volume_open_discovered_on(h, discovery.c_str(), &o, &vol_);
      else
        rc = discovery.empty() ? nvmeof_volume_open(p.data(), p.size(), &o, &vol_)
                               : nvmeof_volume_open_discovered(discovery.c_str(), &o, &vol_);
    }
    if (rc != 0) raise_errno(rc, "nvmeof: cannot open the volume");
    bs_ = nvmeof_volume_block_size(vol_);
    size_ = nvmeof_volume_size(vol_);
  }
  ~PyVolume() { close(); }

  void close() {
    if (!vol_) return;
    nvmeof_volume* v = vol_;
    vol_ = nullptr;
    py::gil_scoped_release nogil;
    nvmeof_volume_close(v);
  }

  nvmeof_volume* get() const {
    if (!vol_) throw py::value_error("nvmeof: I/O on a closed volume");
    return vol_;
  }
  uint32_t block_size() const { return bs_; }
  uint64_t size() const { return size_; }
  uint32_t queue_depth() const { return nvmeof_volume_queue_depth(get()); }
  int event_fd() const {
    const int fd = nvmeof_volume_event_fd(get());
    if (fd < 0) raise_errno(fd, "nvmeof: event_fd");
    return fd;
  }

  // Blocking forms: return the NVMe status (0: success).
  int pread(const py::buffer& b, uint64_t off) {
    nvmeof_volume* v = get();
    const Bytes x(b, true);
    nvmeof_status st = 0;
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = nvmeof_read(v, x.ptr, x.len, off, &st);
    }
    if (rc) raise_errno(rc, "nvmeof: pread");
    return st;
  }
  int pwrite(const py::buffer& b, uint64_t off) {
    nvmeof_volume* v = get();
    const Bytes x(b, false);
    nvmeof_status st = 0;
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = nvmeof_write(v, x.ptr, x.len, off, &st);
    }
    if (rc) raise_errno(rc, "nvmeof: pwrite");
    return st;
  }
  int flush() {
    nvmeof_volume* v = get();
    nvmeof_status st = 0;
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = nvmeof_flush(v, &st);
    }
    if (rc) raise_errno(rc, "nvmeof: flush");
    return st;
  }

  // Asynchronous: 0, or -EAGAIN when every slot is busy (the caller reaps and retries); other
  // errors raise.
  int submit(int op, const py::object& buf, uint64_t off, uint64_t len, uint64_t cookie) {
    nvmeof_volume* v = get();
    int rc;
    switch (op) {
      case NVMEOF_OP_READ: {
        const Bytes x(buf, true);
        rc = nvmeof_submit_read(v, x.ptr, x.len, off, cookie);
        break;
      }
      case NVMEOF_OP_WRITE: {
        const Bytes x(buf, false);
        rc = nvmeof_submit_write(v, x.ptr, x.len, off, cookie);
        break;
      }
      case NVMEOF_OP_FLUSH: rc = nvmeof_submit_flush(v, cookie); break;
      case NVMEOF_OP_WRITE_ZEROES: rc = nvmeof_submit_write_zeroes(v, len, off, cookie); break;
      default: throw py::value_error("nvmeof: unknown op");
    }
    if (rc && rc != -EAGAIN) raise_errno(rc, "nvmeof: submit");
    return rc;
  }

  // Many reads or writes in one call: items are (memoryview, offset) pairs, cookies
  // first_cookie, first_cookie + 1, ... Returns how many were started (stops at the first
  // -EAGAIN).
  size_t submit_many(int op, const py::list& items, uint64_t first_cookie) {
    nvmeof_volume* v = get();
    size_t n = 0;
    for (const auto& it : items) {
      const auto t = it.cast<py::tuple>();
      const Bytes x(t[0], op == NVMEOF_OP_READ);
      const uint64_t off = t[1].cast<uint64_t>();
      const int rc = op == NVMEOF_OP_READ ? nvmeof_submit_read(v, x.ptr, x.len, off, first_cookie + n)
                                          : nvmeof_submit_write(v, x.ptr, x.len, off, first_cookie + n);
      if (rc == -EAGAIN) break;
      if (rc) raise_errno(rc, "nvmeof: submit");
      ++n;
    }
    return n;
  }

  // Completed I/Os as (cookie, status) pairs; never blocks.
  py::list reap(int max) {
    nvmeof_volume* v = get();
    nvmeof_event ev[64];
    py::list out;
    while (max > 0) {
      const int n = nvmeof_volume_reap(v, ev, std::min(max, 64));
      if (n < 0) raise_errno(n, "nvmeof: reap");
      for (int i = 0; i < n; ++i) out.append(py::make_tuple(ev[i].cookie, ev[i].status));
      if (n < std::min(max, 64)) break;
      max -= n;
    }
    return out;
  }

  // Paths at run time; the errno's text is the C API's precise reason (nvmeof_last_error).
  int add_path(const std::string& addr) { return path_change(nvmeof_volume_add_path, "add_path", addr); }
  void remove_path(const std::string& addr) { path_change(nvmeof_volume_remove_path, "remove_path", addr); }

  std::string stats_json() {
    nvmeof_volume* v = get();
    char* s = nullptr;
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = nvmeof_volume_stats_json(v, &s);
    }
    if (rc) raise_errno(rc, "nvmeof: stats");
    std::string r(s);
    nvmeof_string_free(s);
    return r;
  }

 private:
  int path_change(int (*fn)(nvmeof_volume*, const char*), const char* what, const std::string& addr) {
    nvmeof_volume* v = get();
    int rc;
    std::string why;
    {
      py::gil_scoped_release nogil;
      rc = fn(v, addr.c_str());
      if (rc < 0) why = nvmeof_last_error();
    }
    if (rc < 0)
      raise_errno(rc, std::string("nvmeof: ") + what + " " + addr + (why.empty() ? "" : " (" + why + ")"));
    return rc;
  }
  nvmeof_volume* vol_ = nullptr;
  uint32_t bs_ = 0;
  uint64_t size_ = 0;
};

// Batched I/O without a Python object per I/O (nvmeof.Ring): the caller's buffer is cut into
// equal slots; one call starts many reads or writes given as arrays of slot numbers and byte
// offsets, and one call moves finished slots and their statuses into arrays the caller owns.
// Each I/O's cookie is the ring's tag with the slot number below it, so the ring's completions
// and the futures' share the volume's one completion queue: events that are not this ring's go
// back to the caller (the Python side completes their futures).
class PyRing {
 public:
  static constexpr uint64_t kTagBit = 1ull << 63;

  PyRing(PyVolume& vol, const py::buffer& buffer, uint64_t slot_bytes, uint32_t id)
      : vol_(vol), tag_(kTagBit | (static_cast<uint64_t>(id) << 32)) {
    const uint32_t bs = vol.block_size();
    if (slot_bytes == 0 || slot_bytes % bs)
      throw py::value_error("nvmeof.Ring: slot_bytes " + std::to_string(slot_bytes) +
                            " is not a positive multiple of the block size " + std::to_string(bs));
    if (PyObject_GetBuffer(buffer.ptr(), &view_, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0)
      throw py::error_already_set();
    base_ = static_cast<char*>(view_.buf);
    slot_bytes_ = slot_bytes;
    slots_ = static_cast<uint64_t>(view_.len) / slot_bytes;
    if (slots_ == 0) {
      PyBuffer_Release(&view_);
      throw py::value_error("nvmeof.Ring: the buffer (" + std::to_string(view_.len) +
                            " bytes) is smaller than one slot (" + std::to_string(slot_bytes) + ")");
    }
  }
  ~PyRing() { PyBuffer_Release(&view_); }
  PyRing(const PyRing&) = delete;
  PyRing& operator=(const PyRing&) = delete;

  uint64_t slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t tag() const { return tag_; }

  // Starts I/O i on slot slots[i] at byte offset offsets[i], in order, until the volume has no
  // free I/O slot (-EAGAIN); returns how many started. Every item is checked before the first
  // starts, so a bad one raises ValueError and starts nothing.
  size_t submit(int op, const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& slots,
                const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& offsets) {
    nvmeof_volume* v = vol_.get();
    if (op != NVMEOF_OP_READ && op != NVMEOF_OP_WRITE) throw py::value_error("nvmeof.Ring: op must be read or write");
    if (slots.ndim() != 1 || offsets.ndim() != 1 || slots.size() != offsets.size())
      throw py::value_error("nvmeof.Ring: slots and offsets must be 1-D and of the same length");
    const uint64_t* s = slots.data();
    const uint64_t* o = offsets.data();
    const auto n = static_cast<size_t>(slots.size());
    const uint64_t bs = vol_.block_size(), size = vol_.size();
    for (size_t i = 0; i < n; ++i) {
      if (s[i] >= slots_)
        throw py::value_error("nvmeof.Ring: slot " + std::to_string(s[i]) + " is past the ring's " +
                              std::to_string(slots_) + " slots");
      if (o[i] % bs || o[i] > size || size - o[i] < slot_bytes_)
        throw py::value_error("nvmeof.Ring: offset " + std::to_string(o[i]) + " is not a block-aligned start of " +
                              std::to_string(slot_bytes_) + " bytes inside the volume (" +
                              std::to_string(size) + " bytes)");
    }
    size_t started = 0;
    for (; started < n; ++started) {
      char* p = base_ + s[started] * slot_bytes_;
      const int rc = op == NVMEOF_OP_READ ? nvmeof_submit_read(v, p, slot_bytes_, o[started], tag_ | s[started])
                                          : nvmeof_submit_write(v, p, slot_bytes_, o[started], tag_ | s[started]);
      if (rc == -EAGAIN) break;
      if (rc) raise_errno(rc, "nvmeof.Ring: submit");
    }
    return started;
  }

  // As reap(), but first waits (without the GIL) up to timeout_us (negative: no limit) until
  // `min` I/Os of the volume have finished: on a caller_drive host by running the volume's
  // reactor on this thread, otherwise asleep on its eventfd (nvmeof_volume_reap_wait).
  size_t reap_wait(const py::array& slots_out, const py::array& status_out, py::list& others, int min,
                   int64_t timeout_us) {
    nvmeof_volume* v = vol_.get();
    auto* so = writable<uint64_t>(slots_out, "slots_out");
    auto* st = writable<uint16_t>(status_out, "status_out");
    const auto cap = static_cast<int>(std::min<py::ssize_t>({slots_out.size(), status_out.size(), 1024}));
    if (cap == 0) return 0;
    min = std::clamp(min, 1, cap);
    nvmeof_event ev[1024];
    int got;
    {
      py::gil_scoped_release nogil;
      got = nvmeof_volume_reap_wait(v, ev, cap, min, timeout_us);
    }
    if (got < 0) raise_errno(got, "nvmeof.Ring: reap");
    return sort_events(ev, got, so, st, 0, others);
  }

  // Moves up to len(slots_out) finished I/Os: this ring's into slots_out/status_out (returns
  // how many), any other event onto `others` as (cookie, status). Never blocks.
  size_t reap(const py::array& slots_out, const py::array& status_out, py::list& others) {
    nvmeof_volume* v = vol_.get();
    auto* so = writable<uint64_t>(slots_out, "slots_out");
    auto* st = writable<uint16_t>(status_out, "status_out");
    const auto cap = static_cast<size_t>(std::min(slots_out.size(), status_out.size()));
    size_t n = 0;
    nvmeof_event ev[64];
    while (n < cap) {
      const int want = static_cast<int>(std::min<size_t>(cap - n, 64));
      const int got = nvmeof_volume_reap(v, ev, want);
      if (got < 0) raise_errno(got, "nvmeof.Ring: reap");
      n = sort_events(ev, got, so, st, n, others);
      if (got < want) break;
    }
    return n;
  }

 private:
  // This ring's events go to so/st from index n on (returns the new n), the others to `others`
  // as (cookie, status).
  size_t sort_events(const nvmeof_event* ev, int got, uint64_t* so, uint16_t* st, size_t n, py::list& others) const {
    for (int i = 0; i < got; ++i) {
      if ((ev[i].cookie & ~0xffffffffull) == tag_) {
        so[n] = ev[i].cookie & 0xffffffffull;
        st[n] = static_cast<uint16_t>(ev[i].status);
        ++n;
      } else {
        others.append(py::make_tuple(ev[i].cookie, ev[i].status));
      }
    }
    return n;
  }

  template <typename T>
  static T* writable(const py::array& a, const char* what) {
    if (!a.dtype().is(py::dtype::of<T>()) || a.ndim() != 1 || !(a.flags() & py::array::c_style) || !a.writeable())
      throw py::value_error(std::string("nvmeof.Ring: ") + what + " must be a writable 1-D contiguous numpy array of " +
                            (sizeof(T) == 8 ? "uint64" : "uint16"));
    return static_cast<T*>(const_cast<void*>(a.data()));
  }

  PyVolume& vol_;
  uint64_t tag_;
  Py_buffer view_{};
  char* base_ = nullptr;
  uint64_t slot_bytes_ = 0;
  uint64_t slots_ = 0;
};

// Memory from nvmeof_buffer_alloc, exported through the buffer protocol.
class Buffer {
 public:
  Buffer(size_t n, int node) : n_(n) {
    if (n == 0) throw py::value_error("nvmeof.alloc: nbytes must be > 0");
    const int rc = nvmeof_buffer_alloc(n, node, &p_);
    if (rc) raise_errno(rc, "nvmeof.alloc");
  }
  ~Buffer() { nvmeof_buffer_free(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_;
};

// The Python log handler; called on library threads.
PyObject* g_log_handler = nullptr;

void log_to_python(int level, const char* msg, void*) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) {
    std::fprintf(stderr, "%s\n", msg);
    return;
  }
  PyGILState_STATE g = PyGILState_Ensure();
  if (g_log_handler) {
    PyObject* r = PyObject_CallFunction(g_log_handler, "is", level, msg);
    if (r) Py_DECREF(r);
    else PyErr_Clear();
  } else {
    std::fprintf(stderr, "%s\n", msg);
  }
  PyGILState_Release(g);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "nvmeof C API binding (use the nvmeof package, not this module)";
  m.attr("OP_READ") = int(NVMEOF_OP_READ);
  m.attr("OP_WRITE") = int(NVMEOF_OP_WRITE);
  m.attr("OP_FLUSH") = int(NVMEOF_OP_FLUSH);
  m.attr("OP_WRITE_ZEROES") = int(NVMEOF_OP_WRITE_ZEROES);
  m.attr("KATO_SHORTEST") = NVMEOF_KATO_SHORTEST;
  m.attr("POLL_ADAPTIVE") = int(NVMEOF_POLL_ADAPTIVE);
  m.attr("POLL_BUSY") = int(NVMEOF_POLL_BUSY);
  m.attr("POLL_SLEEP") = int(NVMEOF_POLL_SLEEP);
  m.attr("PLACEMENT_NUMA") = int(NVMEOF_PLACEMENT_NUMA);
  m.attr("PLACEMENT_UNPINNED") = int(NVMEOF_PLACEMENT_UNPINNED);

  py::class_<PyHost>(m, "Host")
      .def(py::init<uint32_t, uint32_t, uint32_t, const std::optional<std::vector<int>>&, const std::string&, bool>(), py::arg("reactors"), py::arg("poll"), py::arg("placement"), py::arg("cpus"), py::arg("metrics_listen"), py::arg("caller_drive") = false)
      .def("close", &PyHost::close)
      .def("metrics_port", &PyHost::metrics_port)
      .def("stats", &PyHost::stats)
      .def("add_discovery", &PyHost::add_discovery)
      .def("remove_discovery", &PyHost::remove_discovery)
      .def("namespace_events_json", &PyHost::namespace_events_json)
      .def("discovery_json", &PyHost::discovery_json);

  py::class_<PyVolume>(m, "Volume")
      .def(py::init<const std::vector<std::string>&, const std::string&, uint32_t, uint32_t,
                    uint32_t, uint32_t, uint32_t, uint32_t, const std::string&, const std::string&,
                    const std::string&, const std::string&, const std::string&, const PyHost*>())
      .def("close", &PyVolume::close)
      .def_property_readonly("block_size", &PyVolume::block_size)
      .def_property_readonly("size", &PyVolume::size)
      .def_property_readonly("queue_depth", &PyVolume::queue_depth)
      .def_property_readonly("event_fd", &PyVolume::event_fd)
      .def("pread", &PyVolume::pread)
      .def("pwrite", &PyVolume::pwrite)
      .def("flush", &PyVolume::flush)
      .def("submit", &PyVolume::submit)
      .def("submit_many", &PyVolume::submit_many)
      .def("reap", &PyVolume::reap)
      .def("add_path", &PyVolume::add_path)
      .def("remove_path", &PyVolume::remove_path)
      .def("stats_json", &PyVolume::stats_json);

  // keep_alive: the ring uses the volume object, which must outlive it.
  py::class_<PyRing>(m, "Ring")
      .def(py::init<PyVolume&, const py::buffer&, uint64_t, uint32_t>(), py::keep_alive<1, 2>())
      .def_property_readonly("slots", &PyRing::slots)
      .def_property_readonly("slot_bytes", &PyRing::slot_bytes)
      .def_property_readonly("tag", &PyRing::tag)
      .def("submit", &PyRing::submit)
      .def("reap", &PyRing::reap)
      .def("reap_wait", &PyRing::reap_wait);

  py::class_<Buffer>(m, "Buffer", py::buffer_protocol())
      .def(py::init<size_t, int>())
      .def("__len__", &Buffer::size)
      .def_buffer([](Buffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.size())}, {1});
      });

  m.def("status_str", [](int st) {
    char buf[96];
    return std::string(nvmeof_status_str(static_cast<nvmeof_status>(st), buf, sizeof buf));
  });
  // A library thread inside log_to_python holds the log lock while it waits for the GIL: the
  // callback is swapped with the GIL released.
  m.def("set_log_handler", [](py::object h) {
    if (h.is_none()) {
      {
        py::gil_scoped_release nogil;
        nvmeof_set_log_callback(nullptr, nullptr);
      }
      Py_XDECREF(g_log_handler);
      g_log_handler = nullptr;
      return;
    }
    PyObject* old = g_log_handler;
    g_log_handler = h.inc_ref().ptr();
    Py_XDECREF(old);
    py::gil_scoped_release nogil;
    nvmeof_set_log_callback(&log_to_python, nullptr);
  });
}
