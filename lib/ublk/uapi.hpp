// The ublk driver's command codes in their ioctl encoding (Linux 6.4+; the kernels that do not
// build the legacy codes accept only these), made from the numbers of <linux/ublk_cmd.h>, whose
// Debian 12 copy (6.1) has only the legacy ones.
#pragma once

#include <linux/ublk_cmd.h>
#include <sys/ioctl.h>

#include <cstdint>

namespace nvmeof::ublk {

constexpr uint32_t ctrl_op(unsigned nr) { return _IOWR('u', nr, struct ublksrv_ctrl_cmd); }
constexpr uint32_t io_op(unsigned nr) { return _IOWR('u', nr, struct ublksrv_io_cmd); }

inline constexpr uint32_t kAddDev = ctrl_op(UBLK_CMD_ADD_DEV);
inline constexpr uint32_t kDelDev = ctrl_op(UBLK_CMD_DEL_DEV);
inline constexpr uint32_t kStartDev = ctrl_op(UBLK_CMD_START_DEV);
inline constexpr uint32_t kStopDev = ctrl_op(UBLK_CMD_STOP_DEV);
inline constexpr uint32_t kSetParams = ctrl_op(UBLK_CMD_SET_PARAMS);
inline constexpr uint32_t kGetDevInfo = ctrl_op(UBLK_CMD_GET_DEV_INFO);
inline constexpr uint32_t kStartUserRecovery = ctrl_op(UBLK_CMD_START_USER_RECOVERY);
inline constexpr uint32_t kEndUserRecovery = ctrl_op(UBLK_CMD_END_USER_RECOVERY);
// Linux 6.9+: deletes without waiting for the device's last reference.
inline constexpr uint32_t kDelDevAsync = _IOR('u', 0x14, struct ublksrv_ctrl_cmd);

inline constexpr uint32_t kFetchReq = io_op(UBLK_IO_FETCH_REQ);
inline constexpr uint32_t kCommitAndFetchReq = io_op(UBLK_IO_COMMIT_AND_FETCH_REQ);

// The descriptor array of queue q sits at this stride in the char device's mmap space, sized for
// the largest depth whatever the device's own.
inline constexpr size_t kDescStride = ((UBLK_MAX_QUEUE_DEPTH * sizeof(ublksrv_io_desc)) + 4095) & ~size_t{4095};

}  // namespace nvmeof::ublk
