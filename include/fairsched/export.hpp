// Symbol visibility of libfairsched. The library is compiled with
// -fvisibility=hidden; only what is marked FAIRSCHED_API is exported from
// libfairsched.so. Headers of the C ABI (fairsched.h) carry their own marker.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define FAIRSCHED_API __attribute__((visibility("default")))
#else
#define FAIRSCHED_API
#endif
