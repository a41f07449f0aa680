// A mutex that spins a little before it sleeps (glibc's adaptive kind). The
// bridge's lock is held for a ring push or a map lookup: a thread that
// finds it taken nearly always gets it within the spin, where std::mutex
// would sleep in futex and be woken by the holder — two system calls and a
// context switch.
#pragma once

#include <pthread.h>

namespace fairsched::gateway {

class AdaptiveMutex {
 public:
  AdaptiveMutex() {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&m_, &a);
    pthread_mutexattr_destroy(&a);
  }
  ~AdaptiveMutex() { pthread_mutex_destroy(&m_); }
  AdaptiveMutex(const AdaptiveMutex&) = delete;
  AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;

  void lock() { pthread_mutex_lock(&m_); }
  bool try_lock() { return pthread_mutex_trylock(&m_) == 0; }
  void unlock() { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_;
};

}  // namespace fairsched::gateway
