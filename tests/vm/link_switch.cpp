// Takes a network interface down or up with one ioctl and prints CLOCK_MONOTONIC (ns) just
// before and just after it: the moment of a cut, for a guest script that measures what follows
// (`ip link set` under TCG takes up to a second to start, so its own timing says little).
//
// usage: link_switch [--netns NAME] [--on-line] IFNAME up|down
//   --netns NAME  the interface lives in the named network namespace (/run/netns/NAME)
//   --on-line     switch only once a line (or end of file) arrives on stdin: started ahead of
//                 time and triggered through a pipe, the cut costs no process start
// Prints "<before_ns> <after_ns>". Exit 0, 1 on failure (with the reason on stderr), 2 on bad
// arguments.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int fail(const char* what, const std::string& arg) {
  std::fprintf(stderr, "link_switch: %s %s: %s\n", what, arg.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string netns;
  bool on_line = false;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    if (std::strcmp(argv[i], "--netns") == 0 && i + 1 < argc) {
      netns = argv[++i];
    } else if (std::strcmp(argv[i], "--on-line") == 0) {
      on_line = true;
    } else {
      break;
    }
  }
  if (argc - i != 2 || (std::strcmp(argv[i + 1], "up") != 0 && std::strcmp(argv[i + 1], "down") != 0)) {
    std::fprintf(stderr, "usage: link_switch [--netns NAME] [--on-line] IFNAME up|down\n");
    return 2;
  }
  const std::string ifname = argv[i];
  const bool up = std::strcmp(argv[i + 1], "up") == 0;
  if (ifname.size() >= IFNAMSIZ) {
    errno = ENAMETOOLONG;
    return fail("interface", ifname);
  }

  if (!netns.empty()) {
    const std::string path = "/run/netns/" + netns;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail("open", path);
    if (::setns(fd, CLONE_NEWNET) != 0) return fail("setns", path);
    ::close(fd);
  }
  // A socket of the namespace: the ioctl acts on that namespace's devices.
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail("socket", "AF_INET");
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, ifname.c_str(), ifname.size());
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) return fail("SIOCGIFFLAGS", ifname);
  ifr.ifr_flags = up ? static_cast<short>(ifr.ifr_flags | IFF_UP) : static_cast<short>(ifr.ifr_flags & ~IFF_UP);
  if (on_line) {
    char c = 0;
    while (::read(STDIN_FILENO, &c, 1) == 1 && c != '\n') {
    }
  }
  const uint64_t before = monotonic_ns();
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) return fail("SIOCSIFFLAGS", ifname);
  const uint64_t after = monotonic_ns();
  ::close(s);
  std::printf("%llu %llu\n", static_cast<unsigned long long>(before), static_cast<unsigned long long>(after));
  return 0;
}
