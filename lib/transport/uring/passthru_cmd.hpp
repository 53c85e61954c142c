// Fills the kernel's passthrough command (struct nvme_admin_cmd for the ioctl, struct
// nvme_uring_cmd for io_uring: the same fields) from our Sqe and a data buffer.
#pragma once

#include <cstdint>

#include "nvmeof/command.hpp"

namespace nvmeof::uring {

template <class KernelCmd>
void fill_passthru(KernelCmd& c, const Sqe& cmd, void* data, uint32_t len, uint32_t timeout_ms) noexcept {
  c.opcode = cmd.opcode;
  c.nsid = cmd.nsid;
  c.cdw2 = cmd.cdw2;
  c.cdw3 = cmd.cdw3;
  c.addr = reinterpret_cast<uintptr_t>(data);
  c.data_len = len;
  c.cdw10 = cmd.cdw10;
  c.cdw11 = cmd.cdw11;
  c.cdw12 = cmd.cdw12;
  c.cdw13 = cmd.cdw13;
  c.cdw14 = cmd.cdw14;
  c.cdw15 = cmd.cdw15;
  c.timeout_ms = timeout_ms;
}

}  // namespace nvmeof::uring
