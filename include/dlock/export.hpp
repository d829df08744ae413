#pragma once

// dlock's headers are C++20; say so plainly rather than fail deep inside them.
#if __cplusplus < 202002L
#error "dlock needs C++20 (-std=c++20, or target_link_libraries(... dlock::dlock), which asks for it)"
#endif

// Symbol visibility for the dlock library. The library is built with hidden visibility;
// only declarations marked DLOCK_EXPORT are part of the ABI of a shared build.
#if defined(DLOCK_STATIC_DEFINE)
#define DLOCK_EXPORT
#else
#define DLOCK_EXPORT __attribute__((visibility("default")))
#endif
