// Whether the code is built with ThreadSanitizer: gcc says so with __SANITIZE_THREAD__, clang
// with __has_feature(thread_sanitizer). PHOS_THREAD_SANITIZER is defined (to 1) for the
// preprocessor, phos::kThreadSanitizer says it to C++.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define PHOS_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PHOS_THREAD_SANITIZER 1
#endif
#endif

namespace phos {

#if defined(PHOS_THREAD_SANITIZER)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

}  // namespace phos
