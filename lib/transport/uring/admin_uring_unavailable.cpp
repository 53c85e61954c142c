// liburing without IORING_OP_URING_CMD: admin commands go through the ioctl (admin.hpp).
#include <cerrno>

#include "transport/uring/admin.hpp"

namespace nvmeof::uring {

int run_admin_uring(int, const Sqe&, void*, uint32_t, uint32_t, uint32_t&) noexcept { return -ENOSYS; }

}  // namespace nvmeof::uring
