// Atomic access to plain integers in shared memory.
//
// The records in shm/layout.hpp hold plain integers, not std::atomic: they are
// trivially copyable, implicit-lifetime types whose bytes are fixed by the
// layout version, and a mapping of them needs no constructor. Every access to
// a word that another process may touch at the same time goes through these
// helpers (std::atomic_ref), so the compiler neither tears, fuses nor repeats
// it: a value read once from shared memory is the value used.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace fairsched::shm {

template <class T>
concept SharedWord = std::is_integral_v<T> && std::atomic_ref<T>::is_always_lock_free &&
    (sizeof(T) == 4 || sizeof(T) == 8);

// A lock-free load of a naturally aligned 4- or 8-byte word is a plain load,
// so this is also safe on a read-only mapping.
template <SharedWord T>
inline T sharedLoad(const T& word, std::memory_order order) noexcept {
  return std::atomic_ref<T>(const_cast<T&>(word)).load(order);
}

template <SharedWord T>
inline void sharedStore(T& word, std::type_identity_t<T> value, std::memory_order order) noexcept {
  std::atomic_ref<T>(word).store(value, order);
}

template <SharedWord T>
inline T sharedExchange(T& word, std::type_identity_t<T> value, std::memory_order order) noexcept {
  return std::atomic_ref<T>(word).exchange(value, order);
}

template <SharedWord T>
inline T sharedFetchOr(T& word, std::type_identity_t<T> bits, std::memory_order order) noexcept {
  return std::atomic_ref<T>(word).fetch_or(bits, order);
}

template <SharedWord T>
inline T sharedFetchAnd(T& word, std::type_identity_t<T> bits, std::memory_order order) noexcept {
  return std::atomic_ref<T>(word).fetch_and(bits, order);
}

template <SharedWord T>
inline bool sharedCompareExchangeWeak(T& word, T& expected, std::type_identity_t<T> desired,
                                      std::memory_order success,
                                      std::memory_order failure) noexcept {
  return std::atomic_ref<T>(word).compare_exchange_weak(expected, desired, success, failure);
}

template <SharedWord T>
inline bool sharedCompareExchange(T& word, T& expected, std::type_identity_t<T> desired,
                                  std::memory_order success, std::memory_order failure) noexcept {
  return std::atomic_ref<T>(word).compare_exchange_strong(expected, desired, success, failure);
}

// A full (seq_cst) fence, for the store-then-load ordering of the sleep/wake
// protocol (doorbell.hpp). GCC rejects atomic_thread_fence under
// -fsanitize=thread (-Wtsan) because TSan does not model fences. Nothing TSan
// checks depends on this one — all data is ordered by release/acquire pairs —
// so the warning is silenced for this call alone and the fence stays real.
inline void seqCstFence() noexcept {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#pragma GCC diagnostic pop
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// Asks for the cache line of `p` in a writable state ahead of a store, so
// that its transfer from the other process's core overlaps other work
// instead of holding up the stores (and the fence) behind it. A hint:
// PREFETCHW on x86-64 (a no-op where the CPU lacks it, whatever the -march),
// the compiler's write prefetch elsewhere.
inline void prefetchForWrite(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

// Tells the CPU it is in a spin-wait loop.
inline void cpuRelax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace fairsched::shm
