// The NVM I/O commands the embedded target executes: Read, Write, Flush, Write Zeroes and Dataset
// Management (deallocate zeroes the ranges). plan_io validates a command before any data moves
// (so a bad write is refused before its R2T), execute_io runs it.
// Threading: pure functions over their arguments; the namespace store locks itself.
#pragma once

#include <cstdint>
#include <span>

#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::target {

class NsStore;
class Subsystem;

/// What a validated I/O command will touch.
struct IoPlan {
  NsStore* ns = nullptr;  ///< nullptr only for a Flush of every namespace (NSID FFFFFFFFh)
  uint64_t offset = 0;    ///< byte offset of the LBA range
  uint64_t len = 0;       ///< byte length of the LBA range
  uint32_t data_len = 0;  ///< bytes of data the command moves (0: none)
  bool to_host = false;   ///< data moves controller -> host (Read)
};

/// Validates `c`. Errors: invalid opcode, invalid namespace, LBA out of range, invalid field
/// (transfer larger than `max_transfer`).
NvmeStatus plan_io(const Subsystem& subsys, const Sqe& c, uint32_t max_transfer, IoPlan& plan) noexcept;

/// Executes a planned command. `in` holds the data a Write / DSM brought (plan.data_len bytes);
/// a Read writes plan.data_len bytes to `out`. Errors: LBA out of range (a DSM range), media
/// errors (write fault, unrecovered read error) when a file-backed store fails.
NvmeStatus execute_io(const Subsystem& subsys, const Sqe& c, const IoPlan& plan,
                      std::span<const uint8_t> in, uint8_t* out) noexcept;

}  // namespace nvmeof::target
