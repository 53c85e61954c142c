#include "core/key_text.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace nvmeof::detail {

Result<std::string> read_key_text(std::string_view arg) {
  if (!is_key_file(arg)) return std::string(arg);
  const std::string path(arg.substr(1));
  if (path.empty()) return errno_code(ENOENT);
  // read(2) rather than a stream: a directory or an unreadable file gives its errno (EISDIR,
  // EACCES, EIO), where a stream would give an empty key.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_code(errno);
  std::string key;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      key.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : 0;
    ::close(fd);
    if (err) return errno_code(err);
    break;
  }
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ' || key.back() == '\t'))
    key.pop_back();
  return key;
}

}  // namespace nvmeof::detail
