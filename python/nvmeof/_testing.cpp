// nvmeof._testing: the embedded target (nvmeof::Target) for the package's tests and examples.
// Built in the tree only, not installed.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "nvmeof/target.hpp"

namespace py = pybind11;
using namespace nvmeof;

namespace {

class PyTarget {
 public:
  PyTarget(size_t ports, uint64_t size, uint32_t block_size, const std::string& nqn,
           const std::vector<std::tuple<std::string, std::string, std::string>>& hosts,
           const std::string& tls, const std::string& tls_psk, uint32_t namespaces)
      : nqn_(nqn) {
    if (namespaces == 0) throw py::value_error("nvmeof._testing.Target: namespaces must be >= 1");
    PortTls port_tls = PortTls::none;
    if (tls == "required") port_tls = PortTls::required;
    else if (tls == "not-required") port_tls = PortTls::not_required;
    else if (tls != "none") throw py::value_error("nvmeof._testing.Target: tls is none, not-required or required");
    TargetOptions o;
    o.ports.clear();
    for (size_t i = 0; i < ports; ++i) {
      TargetPort p;
      p.traddr = "127.0.0.1";
      p.trsvcid = "0";
      p.tls = port_tls;
      p.tls_psk = tls_psk;
      o.ports.push_back(p);
    }
    o.subsystems[0].nqn = nqn;
    o.subsystems[0].namespaces.clear();
    for (uint32_t i = 0; i < namespaces; ++i) {
      TargetNamespace ns;
      ns.nsid = i + 1;
      ns.size_bytes = size;
      ns.block_size = block_size;
      o.subsystems[0].namespaces.push_back(ns);
    }
    for (const auto& [hnqn, key, ctrl_key] : hosts) o.subsystems[0].hosts.push_back({hnqn, key, ctrl_key, "", ""});
    Result<std::unique_ptr<Target>> t = [&] {
      py::gil_scoped_release nogil;
      return Target::start(o);
    }();
    if (!t) throw std::runtime_error("nvmeof._testing: target start: " + t.error().message());
    t_ = std::move(t.value());
    n_ = ports;
  }

  std::vector<std::string> addresses() const {
    std::vector<std::string> r;
    for (size_t i = 0; i < n_; ++i) r.push_back(t_->port_address(i));
    return r;
  }
  // Closes every connection on the port now (RST); new connects are still accepted.
  void reset(size_t port) { t_->inject(port, FaultKind::reset); }
  void refuse(size_t port) { t_->inject(port, FaultKind::refuse); }
  void clear_faults(size_t port) { t_->clear_faults(port); }
  void fail_commands(size_t port, int status) {
    if (status < 0) t_->fail_commands(port, std::nullopt);
    else t_->fail_commands(port, NvmeStatus{static_cast<uint16_t>(status)});
  }
  py::dict port_stats(size_t port) const {
    const PortStats s = t_->stats(port);
    py::dict d;
    d["connections"] = s.connections;
    d["live_connections"] = s.live_connections;
    d["commands"] = s.commands;
    d["reads"] = s.reads;
    d["writes"] = s.writes;
    d["authentications"] = s.authentications;
    d["auth_failures"] = s.auth_failures;
    d["tls_sessions"] = s.tls_sessions;
    d["tls_failures"] = s.tls_failures;
    d["tls_plaintext_refused"] = s.tls_plaintext_refused;
    return d;
  }
  py::bytes read_ns(uint64_t offset, size_t len, uint32_t nsid) {
    std::string b(len, '\0');
    if (auto r = t_->read_ns(nqn_, nsid, offset, b.data(), len); !r)
      throw std::runtime_error("nvmeof._testing: read_ns: " + r.error().message());
    return py::bytes(b);
  }
  void write_ns(uint64_t offset, const py::bytes& data, uint32_t nsid) {
    const std::string b = data;
    if (auto r = t_->write_ns(nqn_, nsid, offset, b.data(), b.size()); !r)
      throw std::runtime_error("nvmeof._testing: write_ns: " + r.error().message());
  }
  void stop() {
    py::gil_scoped_release nogil;
    if (t_) t_->stop();
  }
  const std::string& nqn() const { return nqn_; }

 private:
  std::string nqn_;
  std::unique_ptr<Target> t_;
  size_t n_ = 0;
};

}  // namespace

PYBIND11_MODULE(_testing, m) {
  m.doc() = "The embedded NVMe/TCP target, for tests and examples";
  py::class_<PyTarget>(m, "Target")
      .def(py::init<size_t, uint64_t, uint32_t, const std::string&,
                    const std::vector<std::tuple<std::string, std::string, std::string>>&,
                    const std::string&, const std::string&, uint32_t>(),
           py::arg("ports") = 2, py::arg("size") = 64ull << 20, py::arg("block_size") = 4096,
           py::arg("nqn") = "nqn.2024-01.io.nvmeof:python",
           // (host NQN, DH-HMAC-CHAP key, controller key): naming hosts closes the subsystem
           // to every other host
           py::arg("hosts") = std::vector<std::tuple<std::string, std::string, std::string>>{},
           // every port's secure channel ("none", "not-required", "required") and its PSK
           // ("NVMeTLSkey-1:...")
           py::arg("tls") = "none", py::arg("tls_psk") = "",
           // namespaces 1..N of the subsystem, each `size` bytes
           py::arg("namespaces") = 1)
      .def_property_readonly("addresses", &PyTarget::addresses)
      .def_property_readonly("nqn", &PyTarget::nqn)
      .def("reset", &PyTarget::reset)
      .def("refuse", &PyTarget::refuse)
      .def("clear_faults", &PyTarget::clear_faults)
      .def("fail_commands", &PyTarget::fail_commands)
      .def("port_stats", &PyTarget::port_stats)
      .def("read_ns", &PyTarget::read_ns, py::arg("offset"), py::arg("len"), py::arg("nsid") = 1)
      .def("write_ns", &PyTarget::write_ns, py::arg("offset"), py::arg("data"), py::arg("nsid") = 1)
      .def("stop", &PyTarget::stop)
      .def("__enter__", [](PyTarget& t) -> PyTarget& { return t; }, py::return_value_policy::reference)
      .def("__exit__", [](PyTarget& t, py::args) { t.stop(); });
}
