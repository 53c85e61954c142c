#include "observe/control_socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <cerrno>
#include <cstring>
#include <vector>

namespace nvmeof::detail {

namespace {

using Local = boost::asio::local::stream_protocol;

// A client that sends nothing for this long is dropped, so one stuck peer cannot pin a
// connection forever.
constexpr auto kIdleTimeout = std::chrono::seconds(10);

bool fill_addr(const std::string& path, sockaddr_un& sa) {
  std::memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path) return false;
  std::memcpy(sa.sun_path, path.data(), path.size());
  return true;
}

// Whether something accepts connections on `path` right now.
bool someone_listens(const sockaddr_un& sa) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return live;
}

}  // namespace

struct ControlSocket::State : std::enable_shared_from_this<ControlSocket::State> {
  explicit State(boost::asio::io_context& c) : ctx(c), acceptor(c) {}
  boost::asio::io_context& ctx;
  Local::acceptor acceptor;
  Handler handler;
  bool closed = false;
  std::vector<std::weak_ptr<Local::socket>> sessions;

  void accept_next();
  void serve(std::shared_ptr<Local::socket> sock);
};

namespace {

struct Session : std::enable_shared_from_this<Session> {
  Session(std::shared_ptr<ControlSocket::State> s, std::shared_ptr<Local::socket> k)
      : st(std::move(s)), sock(std::move(k)), timer(st->ctx) {}
  std::shared_ptr<ControlSocket::State> st;
  std::shared_ptr<Local::socket> sock;
  boost::asio::steady_timer timer;
  std::string in;
  std::string out;
  char buf[4096];

  void arm_idle() {
    timer.expires_after(kIdleTimeout);
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) {
        boost::system::error_code ignore;
        self->sock->close(ignore);
      }
    });
  }

  void read() {
    arm_idle();
    sock->async_read_some(boost::asio::buffer(buf),
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                            self->on_read(ec, n);
                          });
  }

  void on_read(const boost::system::error_code& ec, size_t n) {
    if (ec || st->closed) {
      timer.cancel();
      return;
    }
    in.append(buf, n);
    const size_t nl = in.find('\n');
    if (nl == std::string::npos) {
      if (in.size() > kControlMaxRequest) {
        reply(R"({"ok":false,"error":"request too long"})", /*then_close=*/true);
        return;
      }
      read();
      return;
    }
    std::string line = in.substr(0, nl);
    in.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string answer;
    try {
      answer = st->handler(line);
    } catch (const std::exception& e) {
      answer = std::string(R"({"ok":false,"error":"internal error: )") + e.what() + "\"}";
    }
    reply(std::move(answer), false);
  }

  void reply(std::string answer, bool then_close) {
    out = std::move(answer);
    out.push_back('\n');
    boost::asio::async_write(*sock, boost::asio::buffer(out),
                             [self = shared_from_this(), then_close](const boost::system::error_code& ec, size_t) {
                               if (ec || then_close || self->st->closed) {
                                 boost::system::error_code ignore;
                                 self->timer.cancel();
                                 self->sock->close(ignore);
                                 return;
                               }
                               // Another request may already sit in the buffer.
                               if (self->in.find('\n') != std::string::npos) self->on_read({}, 0);
                               else self->read();
                             });
  }
};

}  // namespace

void ControlSocket::State::accept_next() {
  auto sock = std::make_shared<Local::socket>(ctx);
  acceptor.async_accept(*sock, [self = shared_from_this(), sock](const boost::system::error_code& ec) {
    if (self->closed) return;
    if (!ec) self->serve(sock);
    self->accept_next();
  });
}

void ControlSocket::State::serve(std::shared_ptr<Local::socket> sock) {
  std::erase_if(sessions, [](const auto& w) { return w.expired(); });
  sessions.push_back(sock);
  std::make_shared<Session>(shared_from_this(), std::move(sock))->read();
}

Result<std::unique_ptr<ControlSocket>> ControlSocket::open(boost::asio::io_context& ctx, std::string path,
                                                           Handler handler) {
  sockaddr_un sa;
  if (!fill_addr(path, sa)) return errno_code(ENAMETOOLONG);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_code(errno);
  auto fail = [fd](int err) -> std::error_code {
    ::close(fd);
    return errno_code(err);
  };
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EADDRINUSE) return fail(errno);
    // A socket file left by a process that died: replace it; one that answers: refuse.
    struct stat stb;
    if (::lstat(path.c_str(), &stb) != 0 || !S_ISSOCK(stb.st_mode) || someone_listens(sa)) return fail(EADDRINUSE);
    ::unlink(path.c_str());
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) return fail(errno);
  }
  // Connecting needs write permission on the socket file: 0600 keeps it to this user.
  if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 16) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return fail(err);
  }
  auto st = std::make_shared<State>(ctx);
  st->handler = std::move(handler);
  boost::system::error_code ec;
  st->acceptor.assign(Local(), fd, ec);
  if (ec) {
    ::unlink(path.c_str());
    return fail(ec.value());
  }
  st->accept_next();
  return std::unique_ptr<ControlSocket>(new ControlSocket(std::move(path), std::move(st)));
}

ControlSocket::ControlSocket(std::string path, std::shared_ptr<State> st)
    : path_(std::move(path)), st_(std::move(st)) {}

ControlSocket::~ControlSocket() { close(); }

void ControlSocket::close() {
  if (!st_ || st_->closed) return;
  st_->closed = true;
  boost::system::error_code ignore;
  st_->acceptor.close(ignore);
  for (auto& w : st_->sessions)
    if (auto s = w.lock()) s->close(ignore);
  st_->sessions.clear();
  st_->handler = nullptr;
  ::unlink(path_.c_str());
}

Result<std::string> control_request(const std::string& path, std::string_view request,
                                    std::chrono::milliseconds timeout) {
  sockaddr_un sa;
  if (!fill_addr(path, sa)) return errno_code(ENAMETOOLONG);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_code(errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) return errno_code(errno);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto wait = [&](short events) -> int {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return ETIMEDOUT;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0) return errno == EINTR ? 0 : errno;
    return r == 0 ? ETIMEDOUT : 0;
  };
  std::string msg(request);
  msg.push_back('\n');
  for (size_t off = 0; off < msg.size();) {
    if (const int err = wait(POLLOUT)) return errno_code(err);
    const ssize_t n = ::send(fd, msg.data() + off, msg.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return errno_code(errno);
    }
    off += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[4096];
  for (;;) {
    const size_t nl = reply.find('\n');
    if (nl != std::string::npos) {
      reply.resize(nl);
      return reply;
    }
    if (const int err = wait(POLLIN)) return errno_code(err);
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return errno_code(errno);
    }
    if (n == 0) return errno_code(EPROTO);
    reply.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace nvmeof::detail
