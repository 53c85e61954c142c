/* Symbol visibility of the public API. libnvmeof is built with hidden visibility (and a version
 * script): only what is declared with NVMEOF_API, or between NVMEOF_API_BEGIN and
 * NVMEOF_API_END, is exported from the shared library. C-compatible, for nvmeof.h too. */
#ifndef NVMEOF_EXPORT_H
#define NVMEOF_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define NVMEOF_API __attribute__((visibility("default")))
/* For the library's own types behind the public classes (the state a public class points to, or
 * the subclass the library makes of it): hidden, where a class nested in a public one would
 * otherwise take its visibility. */
#define NVMEOF_LOCAL __attribute__((visibility("hidden")))
#define NVMEOF_API_BEGIN _Pragma("GCC visibility push(default)")
#define NVMEOF_API_END _Pragma("GCC visibility pop")
#else
#define NVMEOF_API
#define NVMEOF_LOCAL
#define NVMEOF_API_BEGIN
#define NVMEOF_API_END
#endif

#endif /* NVMEOF_EXPORT_H */
