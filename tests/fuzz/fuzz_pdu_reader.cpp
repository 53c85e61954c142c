// libFuzzer target: the NVMe/TCP PDU stream reader (transport/tcp/pdu.hpp), as the host runs it
// and as the target runs it, digests on or off. The stream is fed in chunks of sizes the input
// chooses, and the same stream is fed again whole: both must see the same PDUs, the same data
// and the same first error. A chunk boundary that changes what the reader sees is a bug.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "transport/tcp/pdu.hpp"

namespace {

using nvmeof::Errc;
namespace tcp = nvmeof::tcp;

constexpr uint32_t kMaxData = 64 * 1024;

struct Event {
  std::vector<uint8_t> hdr;
  std::vector<uint8_t> data;
  bool operator==(const Event&) const = default;
};

struct Recorder {
  bool discard = false;  // give the reader no buffer for data (it must skip it)
  std::vector<Event> events;
  Event cur;
  std::vector<uint8_t> buf;

  Errc on_header(const uint8_t* h, const tcp::HeaderCheck& hc, uint8_t*& dst) noexcept {
    // The reader promises these bounds before it asks for a buffer.
    if (hc.data_len > kMaxData || hc.header_total > tcp::kMaxHeaderLen + tcp::kMaxTermReqData)
      std::abort();
    cur.hdr.assign(h, h + hc.header_total);
    cur.data.clear();
    buf.assign(hc.data_len, 0);
    dst = discard || hc.data_len == 0 ? nullptr : buf.data();
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t*, const tcp::HeaderCheck&) noexcept {
    if (!discard) cur.data = buf;
    events.push_back(cur);
    return Errc::ok;
  }
};

struct Outcome {
  std::vector<Event> events;
  Errc err = Errc::ok;
  bool operator==(const Outcome&) const = default;
};

tcp::PduReader make_reader(uint8_t flags) {
  const auto role = (flags & 0x20) ? tcp::Role::controller : tcp::Role::host;
  tcp::PduReader r(role, kMaxData);
  r.set_negotiated(tcp::Negotiated{(flags & 1) != 0, (flags & 2) != 0,
                                   static_cast<uint8_t>((flags >> 2) & 7)});
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  FuzzedDataProvider fdp(data + 1, size - 1);
  const uint8_t flags = data[0];
  // Chunk sizes come from the end of the input, the stream from the front.
  std::vector<size_t> chunks;
  for (int i = 0; i < 64 && fdp.remaining_bytes() > 0; ++i)
    chunks.push_back(fdp.ConsumeIntegralInRange<size_t>(1, 300));
  const std::vector<uint8_t> stream = fdp.ConsumeRemainingBytes<uint8_t>();

  Outcome whole, pieces;
  {
    tcp::PduReader r = make_reader(flags);
    Recorder h;
    h.discard = (flags & 0x40) != 0;
    size_t off = 0;
    while (off < stream.size() && whole.err == Errc::ok) {
      const auto got = r.consume(stream.data() + off, stream.size() - off, h);
      off += got.bytes;
      whole.err = got.error;
    }
    whole.events = std::move(h.events);
  }
  {
    tcp::PduReader r = make_reader(flags);
    Recorder h;
    h.discard = (flags & 0x40) != 0;
    size_t off = 0;
    size_t i = 0;
    const auto until = (flags & 0x80) ? tcp::ConsumeUntil::pdu_end : tcp::ConsumeUntil::input_end;
    while (off < stream.size() && pieces.err == Errc::ok) {
      const size_t n = std::min(stream.size() - off, chunks.empty() ? stream.size() : chunks[i++ % chunks.size()]);
      size_t used = 0;
      while (used < n && pieces.err == Errc::ok) {
        const auto got = r.consume(stream.data() + off + used, n - used, h, until);
        const size_t k = got.bytes;
        pieces.err = got.error;
        if (k == 0 && pieces.err == Errc::ok) std::abort();  // no progress on non-empty input
        used += k;
      }
      off += used;
    }
    pieces.events = std::move(h.events);
  }
  if (!(whole == pieces)) std::abort();
  return 0;
}
