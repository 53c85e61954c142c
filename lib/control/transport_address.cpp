#include <charconv>
#include <string_view>

#include "nvmeof/controller.hpp"

namespace nvmeof {
namespace {

constexpr std::string_view kDefaultPort = "4420";

bool valid_port(std::string_view p) {
  unsigned v = 0;
  const auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  return ec == std::errc{} && ptr == p.data() + p.size() && v >= 1 && v <= 65535;
}

}  // namespace

std::string TransportAddress::to_string() const {
  switch (transport) {
    case Transport::passthrough:
      return "passthrough://" + traddr;
    case Transport::rdma:
    case Transport::tcp: {
      const bool v6 = traddr.find(':') != std::string::npos;
      std::string s = transport == Transport::tcp ? "tcp://" : "rdma://";
      s += v6 ? "[" + traddr + "]" : traddr;
      return s + ":" + trsvcid;
    }
  }
  return traddr;
}

Result<TransportAddress> TransportAddress::parse(std::string_view s) {
  TransportAddress a;
  if (const size_t scheme = s.find("://"); scheme != std::string_view::npos) {
    const std::string_view name = s.substr(0, scheme);
    s.remove_prefix(scheme + 3);
    if (name == "tcp") a.transport = Transport::tcp;
    else if (name == "rdma") a.transport = Transport::rdma;
    else if (name == "passthrough") a.transport = Transport::passthrough;
    else return Errc::invalid_argument;
  }
  if (a.transport == Transport::passthrough) {
    if (s.empty()) return Errc::invalid_argument;
    a.traddr = std::string(s);
    a.trsvcid.clear();
    return a;
  }
  std::string_view host, port = kDefaultPort;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) return Errc::invalid_argument;
    host = s.substr(1, close - 1);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Errc::invalid_argument;
      port = rest.substr(1);
    }
  } else {
    const size_t colon = s.find(':');
    if (colon != std::string_view::npos && s.find(':', colon + 1) != std::string_view::npos)
      return Errc::invalid_argument;  // an IPv6 address needs brackets
    host = s.substr(0, colon);
    if (colon != std::string_view::npos) port = s.substr(colon + 1);
  }
  if (host.empty() || !valid_port(port)) return Errc::invalid_argument;
  a.traddr = std::string(host);
  a.trsvcid = std::string(port);
  return a;
}

}  // namespace nvmeof
