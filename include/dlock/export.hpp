#pragma once

// Symbol visibility for the dlock library. The library is built with hidden visibility;
// only declarations marked DLOCK_EXPORT are part of the ABI of a shared build.
#if defined(DLOCK_STATIC_DEFINE)
#define DLOCK_EXPORT
#else
#define DLOCK_EXPORT __attribute__((visibility("default")))
#endif
