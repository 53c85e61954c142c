#include <catch2/catch.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/key_text.hpp"

using nvmeof::detail::read_key_text;

namespace {

// A file holding `text`, removed at the end of the scope.
struct TempFile {
  explicit TempFile(const std::string& text) {
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { ::unlink(path); }
  std::string arg() const { return std::string("@") + path; }
  char path[32] = "/tmp/nvmeof-key-XXXXXX";
};

}  // namespace

TEST_CASE("a key argument is the key itself unless it starts with @", "[key_text]") {
  auto k = read_key_text("DHHC-1:00:abc=:");
  REQUIRE(k);
  CHECK(*k == "DHHC-1:00:abc=:");
  // Whitespace in a key given inline is the caller's: only a file's trailing newline is noise.
  CHECK(*read_key_text("key \n") == "key \n");
}

TEST_CASE("a key file's text comes back without its trailing whitespace, the inside kept", "[key_text]") {
  for (const char* tail : {"", "\n", "\r\n", " \t\n\n"}) {
    TempFile f(std::string("NVMeTLSkey-1:01:a b:") + tail);
    auto k = read_key_text(f.arg());
    REQUIRE(k);
    CHECK(*k == "NVMeTLSkey-1:01:a b:");
  }
}

TEST_CASE("a key file that cannot be read is an error with its errno", "[key_text]") {
  auto missing = read_key_text("@/nonexistent/nvmeof/key");
  REQUIRE_FALSE(missing);
  CHECK(missing.error() == std::errc::no_such_file_or_directory);
  auto bare = read_key_text("@");
  REQUIRE_FALSE(bare);
  CHECK(bare.error() == std::errc::no_such_file_or_directory);
  auto dir = read_key_text("@/");  // opens, but is no file to read
  REQUIRE_FALSE(dir);
  CHECK(dir.error() == std::errc::is_a_directory);
}
