// The shared host-side Fabrics Connect (lib/fabric): the command and its data, the response,
// the post-connect (authentication) step and the Authentication Send/Receive commands, over a
// scripted command channel.
#include <catch2/catch.hpp>

#include <nvme/types.h>

#include <cstring>
#include <deque>
#include <vector>

#include "core/fabrics_command.hpp"
#include "fabric/connect.hpp"

using namespace nvmeof;
using namespace nvmeof::fabric;

namespace {

// Records every command and its data out; answers from a script (a completion, or an error);
// writes `reply` into the data-in buffer.
class ScriptedChannel final : public CommandChannel {
 public:
  struct Sent {
    Sqe cmd;
    std::vector<uint8_t> out;
    size_t in_len;
  };
  std::vector<Sent> sent;
  std::deque<Result<Cqe>> answers;
  std::vector<uint8_t> reply;

  Result<Cqe> execute(const Sqe& cmd, std::span<const uint8_t> out, std::span<uint8_t> in,
                      Clock::time_point) override {
    sent.push_back({cmd, {out.begin(), out.end()}, in.size()});
    if (!in.empty()) std::memcpy(in.data(), reply.data(), std::min(in.size(), reply.size()));
    if (answers.empty()) return Cqe{};
    Result<Cqe> a = std::move(answers.front());
    answers.pop_front();
    return a;
  }
};

Cqe completion(uint32_t dw0, NvmeStatus st = status::kSuccess) {
  Cqe c{};
  c.dw0 = dw0;
  c.status_field = static_cast<uint16_t>(st.raw << 1);
  return c;
}

ConnectParams params(uint16_t qid) {
  ConnectParams p;
  p.qid = qid;
  p.depth = 128;
  p.kato_ms = qid == 0 ? 5000 : 0;
  p.cntlid = qid == 0 ? kAdminCntlid : 7;
  p.subnqn = "nqn.2024-01.io.nvmeof:sub";
  p.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:host";
  for (uint8_t i = 0; i < 16; ++i) p.hostid[i] = i;
  return p;
}

const auto kDeadline = Clock::now() + std::chrono::hours(1);

}  // namespace

TEST_CASE("build_connect fills the Connect command and its 1024-byte data") {
  Sqe c;
  std::array<uint8_t, kConnectDataLen> data;
  REQUIRE(build_connect(params(3), c, data));
  CHECK(c.opcode == opcode::kFabrics);
  CHECK(fabrics_type(c) == fctype::kConnect);
  CHECK(c.cdw10 >> 16 == 3);               // QID
  CHECK((c.cdw11 & 0xffff) == 127);        // SQSIZE, 0's based
  CHECK(c.cdw12 == 0);                     // KATO: admin queue only
  nvmf_connect_data d;
  std::memcpy(&d, data.data(), sizeof d);
  CHECK(d.hostid[0] == 0);
  CHECK(d.hostid[15] == 15);
  CHECK(d.cntlid == 7);
  CHECK(std::string(d.subsysnqn) == "nqn.2024-01.io.nvmeof:sub");
  CHECK(std::string(d.hostnqn) == "nqn.2014-08.org.nvmexpress:uuid:host");

  REQUIRE(build_connect(params(0), c, data));
  CHECK(c.cdw12 == 5000);
  std::memcpy(&d, data.data(), sizeof d);
  CHECK(d.cntlid == 0xffff);
}

TEST_CASE("build_connect refuses a bad depth, an empty subsystem NQN and an NQN over 223 bytes") {
  Sqe c;
  std::array<uint8_t, kConnectDataLen> data;
  auto p = params(1);
  p.depth = 0;
  CHECK(build_connect(p, c, data).error() == make_error_code(Errc::invalid_argument));
  p = params(1);
  p.subnqn = "";
  CHECK(build_connect(p, c, data).error() == make_error_code(Errc::invalid_argument));
  const std::string longest(kNqnMaxLen, 'n'), too_long(kNqnMaxLen + 1, 'n');
  p = params(1);
  p.hostnqn = longest;
  CHECK(build_connect(p, c, data));
  nvmf_connect_data d;
  std::memcpy(&d, data.data(), sizeof d);
  CHECK(std::strlen(d.hostnqn) == kNqnMaxLen);  // still NUL-terminated
  p.hostnqn = too_long;
  CHECK(build_connect(p, c, data).error() == make_error_code(Errc::invalid_argument));
}

TEST_CASE("parse_connect_response: CNTLID, the AUTHREQ bits, a rejection as the NVMe status") {
  auto r = parse_connect_response(completion(0x0002'0005));
  REQUIRE(r);
  CHECK(r.value().cntlid == 5);
  CHECK(r.value().auth_required);
  CHECK_FALSE(r.value().secure_channel_required);
  r = parse_connect_response(completion(0x0004'0009));
  REQUIRE(r);
  CHECK(r.value().cntlid == 9);
  CHECK_FALSE(r.value().auth_required);
  CHECK(r.value().secure_channel_required);
  r = parse_connect_response(completion(0, status::kConnectInvalidHost));
  REQUIRE_FALSE(r);
  CHECK(r.error() == make_error_code(status::kConnectInvalidHost));
}

TEST_CASE("connect_queue sends Connect with its data and returns the CNTLID") {
  ScriptedChannel ch;
  ch.answers.push_back(completion(0x21));
  auto r = connect_queue(ch, params(0), {}, kDeadline, "test");
  REQUIRE(r);
  CHECK(r.value().cntlid == 0x21);
  REQUIRE(ch.sent.size() == 1);
  CHECK(fabrics_type(ch.sent[0].cmd) == fctype::kConnect);
  CHECK(ch.sent[0].out.size() == kConnectDataLen);
  CHECK(ch.sent[0].in_len == 0);
}

TEST_CASE("without an authenticator, a controller that requires authentication is refused") {
  for (const uint32_t bit : {kAuthReqAtr, kAuthReqAscr}) {
    ScriptedChannel ch;
    ch.answers.push_back(completion(bit | 1));
    auto r = connect_queue(ch, params(0), {}, kDeadline, "test");
    REQUIRE_FALSE(r);
    CHECK(r.error() == make_error_code(Errc::authentication_required));
    CHECK(r.error().message() == "authentication required but no key configured");
    CHECK(ch.sent.size() == 1);  // nothing sent after Connect
  }
}

TEST_CASE("connect_queue's errors: the channel's as they are, a rejection as its status") {
  ScriptedChannel ch;
  ch.answers.push_back(make_error_code(Errc::timeout));
  auto r = connect_queue(ch, params(1), {}, kDeadline, "test");
  REQUIRE_FALSE(r);
  CHECK(r.error() == make_error_code(Errc::timeout));
  ScriptedChannel rej;
  rej.answers.push_back(completion(0, status::kConnectInvalidParameters));
  r = connect_queue(rej, params(1), {}, kDeadline, "test");
  REQUIRE_FALSE(r);
  CHECK(r.error() == make_error_code(status::kConnectInvalidParameters));
}

TEST_CASE("the authenticator gets the queue's context and exchanges AuthSend/AuthReceive on it") {
  ScriptedChannel ch;
  ch.answers.push_back(completion(kAuthReqAtr | 0x33));  // Connect: ATR, CNTLID 0x33
  ch.reply = {0x90, 0x01, 0x02, 0x03};
  PostConnect seen;
  std::vector<uint8_t> got(4);
  const std::vector<uint8_t> msg = {0x10, 0x00, 0x00, 0x00, 0xaa};
  Authenticator auth = [&](CommandChannel& c, const PostConnect& ctx) {
    seen = ctx;
    if (auto sent = auth_send(c, msg, ctx.deadline); !sent) return sent;
    return auth_receive(c, got, ctx.deadline);
  };
  auto r = connect_queue(ch, params(2), auth, kDeadline, "tcp x qid 2");
  REQUIRE(r);
  CHECK(seen.qid == 2);
  CHECK(seen.cntlid == 0x33);
  CHECK(seen.response.auth_required);
  CHECK(seen.hostnqn == "nqn.2014-08.org.nvmexpress:uuid:host");
  CHECK(seen.subnqn == "nqn.2024-01.io.nvmeof:sub");
  CHECK(seen.label == "tcp x qid 2");
  REQUIRE(ch.sent.size() == 3);
  const Sqe& send = ch.sent[1].cmd;
  CHECK(send.opcode == opcode::kFabrics);
  CHECK(fabrics_type(send) == fctype::kAuthenticationSend);
  CHECK(send.cdw10 == 0xe9010100u);  // SECP E9h, SPSP1 01h, SPSP0 01h, NSSF 0
  CHECK(send.cdw11 == msg.size());   // TL
  CHECK(ch.sent[1].out == msg);
  CHECK(is_host_to_controller(send));
  const Sqe& recv = ch.sent[2].cmd;
  CHECK(fabrics_type(recv) == fctype::kAuthenticationReceive);
  CHECK(recv.cdw10 == 0xe9010100u);
  CHECK(recv.cdw11 == 4);  // AL
  CHECK(ch.sent[2].in_len == 4);
  CHECK(is_controller_to_host(recv));
  CHECK(got == ch.reply);
}

TEST_CASE("an authenticator's failure fails the connect with its error") {
  ScriptedChannel ch;
  ch.answers.push_back(completion(kAuthReqAtr | 1));
  ch.answers.push_back(completion(0, status::kInvalidField));  // AuthSend refused
  Authenticator auth = [](CommandChannel& c, const PostConnect& ctx) {
    const uint8_t m[8] = {};
    return auth_send(c, m, ctx.deadline);
  };
  auto r = connect_queue(ch, params(0), auth, kDeadline, "test");
  REQUIRE_FALSE(r);
  CHECK(r.error() == make_error_code(status::kInvalidField));
}
