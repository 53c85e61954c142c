// Key arguments as users give them: the key's text itself, or "@PATH" of a file that holds it
// (nvme-cli's convention). Every key option of the library and of the tools (DH-HMAC-CHAP
// secrets, TLS PSKs, the target's host keys) reads through here, so a key file works the same
// everywhere: its text with trailing whitespace (newlines, CR, spaces, tabs) removed.
//
// Threading: none (pure; reads a file).
#pragma once

#include <string>
#include <string_view>

#include "nvmeof/status.hpp"

namespace nvmeof::detail {

/// True when `arg` names a file ("@PATH").
inline bool is_key_file(std::string_view arg) noexcept { return arg.starts_with('@'); }

/// The key `arg` stands for: `arg` itself, or the trimmed text of the file "@PATH" names.
/// Errors: the errno of opening or reading the file (ENOENT for "@" alone).
Result<std::string> read_key_text(std::string_view arg);

}  // namespace nvmeof::detail
