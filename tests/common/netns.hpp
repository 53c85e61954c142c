// A real network partition for integration tests: the host (this process, root network
// namespace) reaches the embedded target through veth pairs whose target ends live in a network
// namespace of the test's own, and a link is cut by taking its target end down.
//
// A veth whose peer is down drops what it is given without a word (no RST, no ICMP): the host's
// TCP goes on retransmitting into nothing, which is exactly what a partition looks like from
// either side. Nothing for a test subnet can leave the machine meanwhile: every subnet is also
// covered by an `unreachable` route on the host side (a higher metric than the veth's route),
// added before any link exists and removed after the link is gone.
//
// Set-up and tear-down go through iproute2 (`ip`); partition() and heal() are one ioctl each on
// a socket that belongs to the namespace, so they take effect before they return, with no
// process to spawn on a loaded machine.
//
// Names: the namespace is "nvmeof-t-<pid>-<n>"; path i uses 10.213.<x>.0/24 (host .1, target .2)
// over the veth pair "nvmeoft<x>h" (root namespace) / "nvmeoft<x>t" (the test namespace), where
// <x> is the lowest third octet no other harness uses (normally 0, 1, ...). Set-up and tear-down
// hold an flock on kLockPath, so two test programs never pick the same octet and never see each
// other half-built; a run that died without tearing down is swept by the next construction.
//
// Threading: construct, destroy, partition and heal from one thread (the test's); run_in_ns
// may be called from any thread.
#pragma once

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace nvmeof::test {

namespace detail {

inline constexpr const char* kNetnsPrefix = "nvmeof-t-";
inline constexpr const char* kIfPrefix = "nvmeoft";
inline constexpr const char* kSubnetPrefix = "10.213.";
inline constexpr const char* kTestRange = "10.213.0.0/16";  ///< every kSubnetPrefix subnet
inline constexpr const char* kLockPath = "/run/lock/nvmeof-partition-net.lock";
inline constexpr int kUnreachableMetric = 4000;
inline constexpr int kMaxOctet = 255;

struct CommandResult {
  int status = -1;  ///< the exit status; -1 when it did not run or did not exit
  std::string output;  ///< stdout and stderr together
};

/// Runs `cmd` through the shell, stderr folded into stdout so a failure can be reported whole.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int ws = ::pclose(p);
  if (ws != -1 && WIFEXITED(ws)) r.status = WEXITSTATUS(ws);
  return r;
}

/// Set-up: a failed command throws, naming the command and what it said.
inline std::string must(const std::string& cmd) {
  auto r = run_command(cmd);
  if (r.status != 0)
    throw std::runtime_error("`" + cmd + "` failed (exit " + std::to_string(r.status) + "): " +
                             r.output);
  return r.output;
}

/// Tear-down: a command whose object may already be gone is fine to fail; only say so when the
/// failure was something else.
inline void attempt(const std::string& cmd) {
  auto r = run_command(cmd);
  if (r.status != 0 && r.output.find("Cannot find") == std::string::npos &&
      r.output.find("No such") == std::string::npos &&
      r.output.find("does not exist") == std::string::npos)
    std::fprintf(stderr, "netns harness: `%s` failed (exit %d): %s", cmd.c_str(), r.status,
                 r.output.c_str());
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

inline std::string first_word(const std::string& line) {
  const auto b = line.find_first_not_of(' ');
  if (b == std::string::npos) return {};
  return line.substr(b, line.find(' ', b) - b);
}

/// "nvmeof-t-<pid>-<n>": its pid, or -1 for a name not of that form.
inline long netns_owner(const std::string& name) {
  const std::string prefix = kNetnsPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
  if (end == name.c_str() + prefix.size() || *end != '-' || pid <= 0) return -1;
  return pid;
}

/// A zombie counts as dead: it has let go of its sockets and namespace files, and one killed a
/// moment ago may not be reaped yet when the next run sweeps. Not so a zombie leader whose other
/// threads still run.
inline bool is_alive(long pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string stat(buf, n);
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  // Fields after the comm: state (3rd field of the line), ..., num_threads (20th).
  std::istringstream fields(stat.substr(paren + 2));
  std::string state, field;
  fields >> state;
  for (int i = 4; i < 20; ++i) fields >> field;
  long threads = 0;
  fields >> threads;
  return !((state == "Z" || state == "X") && threads <= 1);
}

/// The octet in "nvmeoft<x>h" / "nvmeoft<x>t" (`end` is 'h' or 't'), or -1.
inline int if_octet(const std::string& name, char end) {
  const std::string prefix = kIfPrefix;
  if (name.size() < prefix.size() + 2 || name.compare(0, prefix.size(), prefix) != 0 ||
      name.back() != end)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int x = std::stoi(digits);
  return x <= kMaxOctet ? x : -1;
}

/// The octet x of "10.213.x.0/24" at the start of `s`, or -1.
inline int subnet_octet(const std::string& s) {
  const std::string prefix = kSubnetPrefix;
  if (s.compare(0, prefix.size(), prefix) != 0) return -1;
  char* end = nullptr;
  const long x = std::strtol(s.c_str() + prefix.size(), &end, 10);
  if (end == s.c_str() + prefix.size() || std::strncmp(end, ".0/24", 5) != 0 || x > kMaxOctet)
    return -1;
  return static_cast<int>(x);
}

inline std::string if_name(int octet, char end) {
  return kIfPrefix + std::to_string(octet) + end;
}
inline std::string subnet(int octet) { return kSubnetPrefix + std::to_string(octet) + ".0/24"; }
inline std::string unreachable_route(int octet) {
  return "unreachable " + subnet(octet) + " metric " + std::to_string(kUnreachableMetric);
}

/// The file lock that serialises set-up and tear-down between harnesses of different processes
/// (the kernel drops it when a process dies, so a crash never leaves it held).
class SetupLock {
 public:
  SetupLock() {
    fd_ = ::open(kLockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), kLockPath);
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int e = errno;
        ::close(fd_);
        throw std::system_error(e, std::generic_category(), "flock");
      }
    }
  }
  ~SetupLock() { ::close(fd_); }
  SetupLock(const SetupLock&) = delete;
  SetupLock& operator=(const SetupLock&) = delete;

 private:
  int fd_ = -1;
};

/// Removes what harnesses of dead processes left behind. Call with the SetupLock held: then no
/// live harness is half-built, so an unreachable test route without its host veth is an orphan.
inline void sweep_leftovers() {
  for (const auto& line : split_lines(run_command("ip netns list").output)) {
    const std::string ns = first_word(line);
    const long pid = netns_owner(ns);
    if (pid < 0 || is_alive(pid)) continue;
    // Host ends first: deleting one deletes its pair now, where a dropped namespace takes its
    // devices down only when the kernel gets round to destroying it.
    for (const auto& l : split_lines(run_command("ip -n " + ns + " -o link show").output)) {
      // "5: nvmeoft0t@if6: <...": the name sits between the first ": " and the '@' or ':'.
      const auto b = l.find(": ");
      if (b == std::string::npos) continue;
      const auto e = l.find_first_of("@:", b + 2);
      const int x = if_octet(l.substr(b + 2, e - b - 2), 't');
      if (x >= 0) attempt("ip link del " + if_name(x, 'h'));
    }
    attempt("ip netns del " + ns);
  }
  const std::string routes = std::string("ip -4 route show root ") + kTestRange;
  for (const auto& line : split_lines(run_command(routes + " type unreachable").output)) {
    // "unreachable 10.213.0.0/24 metric 4000"
    const auto b = line.find(kSubnetPrefix);
    if (b == std::string::npos) continue;
    const int x = subnet_octet(line.substr(b));
    if (x < 0 || line.find("metric " + std::to_string(kUnreachableMetric)) == std::string::npos)
      continue;
    if (::if_nametoindex(if_name(x, 'h').c_str()) == 0)
      attempt("ip route del " + unreachable_route(x));
  }
}

/// Third octets in use by anything in the root namespace (routes or our host veth names).
inline std::set<int> octets_in_use() {
  std::set<int> used;
  const std::string routes = std::string("ip -4 route show root ") + kTestRange + " table all";
  for (const auto& line : split_lines(run_command(routes).output)) {
    const auto b = line.find(kSubnetPrefix);
    if (b != std::string::npos) {
      const int x = subnet_octet(line.substr(b));
      if (x >= 0) used.insert(x);
    }
  }
  for (int x = 0; x <= kMaxOctet; ++x)
    if (::if_nametoindex(if_name(x, 'h').c_str()) != 0) used.insert(x);
  return used;
}

/// Moves the calling thread into the namespace open at `ns_fd`. Only that thread moves: a
/// socket it creates afterwards belongs to the namespace for the socket's whole life.
inline void enter_netns(int ns_fd) {
  if (::setns(ns_fd, CLONE_NEWNET) != 0)
    throw std::system_error(errno, std::generic_category(), "setns");
}

}  // namespace detail

/// Whether a link carries traffic (heal) or drops it silently (partition).
enum class LinkState : uint8_t { up, down };

/// The RAII harness: a network namespace of its own with `npaths` veth pairs into it.
class PartitionNet {
 public:
  /// Whether the harness can run here: root, iproute2 present, `ip netns add` and veth pairs
  /// working. On false, `why` (when given) says which in one line.
  static bool available(std::string* why = nullptr) {
    auto fail = [&](std::string reason) {
      if (why != nullptr) *why = std::move(reason);
      return false;
    };
    if (::geteuid() != 0) return fail("needs root (creates network namespaces and veth pairs)");
    if (detail::run_command("ip -V").status != 0) return fail("iproute2 (`ip`) not found");
    // A probe of our own name: should this process die before removing it, the next
    // construction sweeps it like any other leftover.
    const std::string ns = next_name();
    auto r = detail::run_command("ip netns add " + ns);
    if (r.status != 0) return fail("`ip netns add` failed: " + first_line(r.output));
    // Both ends inside the namespace: no name in the root namespace to collide with.
    r = detail::run_command("ip -n " + ns + " link add probe0 type veth peer name probe1");
    detail::attempt("ip netns del " + ns);
    if (r.status != 0) return fail("veth pairs unavailable: " + first_line(r.output));
    return true;
  }

  /// Sweeps leftovers of dead runs, then builds the namespace and `npaths` paths, each link up.
  /// Throws std::runtime_error / std::system_error (with the failed command's output) when
  /// set-up fails; whatever was built by then is removed first.
  explicit PartitionNet(size_t npaths) : name_(next_name()) {
    try {
      {
        detail::SetupLock lock;
        detail::sweep_leftovers();
        build(npaths);
      }
      const std::string path = "/run/netns/" + name_;
      ns_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (ns_fd_ < 0) throw std::system_error(errno, std::generic_category(), path);
      // errno belongs to the thread that failed, so that thread throws.
      ctl_fd_ = run_in_ns([] {
        const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket in netns");
        return fd;
      });
    } catch (...) {
      tear_down();
      throw;
    }
  }

  /// Removes the routes, veth pairs and namespace. Whatever runs in the namespace (a Target)
  /// must be stopped first: its sockets keep the namespace alive after its name is gone.
  ~PartitionNet() { tear_down(); }

  PartitionNet(const PartitionNet&) = delete;
  PartitionNet& operator=(const PartitionNet&) = delete;

  size_t paths() const noexcept { return octets_.size(); }
  /// The namespace's name (for `ip -n`).
  const std::string& name() const noexcept { return name_; }
  /// Host (root namespace) and target (test namespace) ends of path i: 10.213.<x>.1 and .2.
  std::string host_addr(size_t i) const { return address(i, 1); }
  std::string target_addr(size_t i) const { return address(i, 2); }
  std::string host_ifname(size_t i) const { return detail::if_name(octets_.at(i), 'h'); }
  std::string target_ifname(size_t i) const { return detail::if_name(octets_.at(i), 't'); }

  /// Cuts path i: its target end goes down, so both directions drop silently from the moment
  /// this returns. Throws std::system_error when the ioctl fails.
  void partition(size_t i) { set_link(i, LinkState::down); }
  /// Reconnects path i (its target end up again; the kernel restores its routes as it does).
  void heal(size_t i) { set_link(i, LinkState::up); }

  /// The target end's state as the kernel sees it.
  LinkState link_state(size_t i) const {
    ifreq ifr = request(i);
    if (::ioctl(ctl_fd_, SIOCGIFFLAGS, &ifr) != 0)
      throw std::system_error(errno, std::generic_category(), "SIOCGIFFLAGS " + target_ifname(i));
    return (ifr.ifr_flags & IFF_UP) != 0 ? LinkState::up : LinkState::down;
  }

  /// Runs `fn` on a fresh thread inside the namespace, waits for it and returns its result (or
  /// rethrows what it threw). Sockets `fn` creates belong to the namespace; threads it starts
  /// begin there too.
  template <class Fn>
  std::invoke_result_t<Fn&> run_in_ns(Fn&& fn) const {
    using R = std::invoke_result_t<Fn&>;
    const int ns_fd = ns_fd_;
    std::packaged_task<R()> task([&fn, ns_fd]() -> R {
      detail::enter_netns(ns_fd);
      return fn();
    });
    auto result = task.get_future();
    std::thread(std::move(task)).join();
    return result.get();
  }

 private:
  static std::string next_name() {
    static std::atomic<unsigned> counter{0};
    return detail::kNetnsPrefix + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  }

  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  // Each octet is recorded before its route is added, so a failure part-way leaves tear_down
  // (which tolerates what is already missing) knowing everything there is to remove.
  void build(size_t npaths) {
    detail::must("ip netns add " + name_);
    made_netns_ = true;
    std::set<int> used = detail::octets_in_use();
    int x = 0;
    for (size_t i = 0; i < npaths; ++i) {
      while (x <= detail::kMaxOctet && used.count(x) != 0) ++x;
      if (x > detail::kMaxOctet) throw std::runtime_error("netns harness: no free 10.213.x.0/24");
      used.insert(x);
      octets_.push_back(x);
      const std::string h = detail::if_name(x, 'h'), t = detail::if_name(x, 't');
      const std::string net = detail::kSubnetPrefix + std::to_string(x);
      detail::must("ip route add " + detail::unreachable_route(x));
      detail::must("ip link add " + h + " type veth peer name " + t + " netns " + name_);
      detail::must("ip addr add " + net + ".1/24 dev " + h);
      detail::must("ip -n " + name_ + " addr add " + net + ".2/24 dev " + t);
      detail::must("ip link set " + h + " up");
      detail::must("ip -n " + name_ + " link set " + t + " up");
    }
    detail::must("ip -n " + name_ + " link set lo up");
  }

  void tear_down() noexcept {
    if (ctl_fd_ >= 0) ::close(ctl_fd_);
    if (ns_fd_ >= 0) ::close(ns_fd_);
    ctl_fd_ = ns_fd_ = -1;
    try {
      detail::SetupLock lock;
      // The veth before its unreachable route, so the subnet is never without a route that
      // keeps it on this machine.
      for (int x : octets_) {
        detail::attempt("ip link del " + detail::if_name(x, 'h'));
        detail::attempt("ip route del " + detail::unreachable_route(x));
      }
      if (made_netns_) detail::attempt("ip netns del " + name_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "netns harness: tear-down of %s: %s\n", name_.c_str(), e.what());
    }
    octets_.clear();
    made_netns_ = false;
  }

  std::string address(size_t i, int host) const {
    return detail::kSubnetPrefix + std::to_string(octets_.at(i)) + "." + std::to_string(host);
  }

  ifreq request(size_t i) const {
    ifreq ifr{};
    const std::string n = target_ifname(i);
    std::memcpy(ifr.ifr_name, n.c_str(), std::min(n.size(), sizeof ifr.ifr_name - 1));
    return ifr;
  }

  void set_link(size_t i, LinkState s) {
    ifreq ifr = request(i);
    if (::ioctl(ctl_fd_, SIOCGIFFLAGS, &ifr) != 0)
      throw std::system_error(errno, std::generic_category(), "SIOCGIFFLAGS " + target_ifname(i));
    if (s == LinkState::up)
      ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    else
      ifr.ifr_flags = static_cast<short>(ifr.ifr_flags & ~IFF_UP);
    if (::ioctl(ctl_fd_, SIOCSIFFLAGS, &ifr) != 0)
      throw std::system_error(errno, std::generic_category(), "SIOCSIFFLAGS " + target_ifname(i));
  }

  std::string name_;
  std::vector<int> octets_;  ///< third octet of each path's subnet
  bool made_netns_ = false;
  int ns_fd_ = -1;   ///< /run/netns/<name_>: what run_in_ns threads setns() into
  int ctl_fd_ = -1;  ///< a socket of the namespace: partition/heal ioctls act on its devices
};

}  // namespace nvmeof::test
