// libFuzzer target: every Identify / log page parser of the host on inputs of any length. The
// parsers read what a controller sent; a short, long or self-contradicting page must give an
// error or a value, never a read outside the input (ASan) or undefined behaviour (UBSan).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/identify.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> raw(data, size);
  if (auto c = nvmeof::parse_identify_controller(raw)) (void)c->mdts;
  if (auto n = nvmeof::parse_identify_namespace(raw, 1)) (void)n->size_blocks;
  nvmeof::NamespaceId id{};
  (void)nvmeof::parse_ns_descriptors(raw, id);
  if (auto a = nvmeof::parse_ana_log(raw)) (void)a->groups.size();
  if (auto d = nvmeof::parse_discovery_log(raw)) (void)d->entries.size();
  return 0;
}
