// fake_fairschedd -- COMMAND [ARGS...]
//
// Serves one FakeDaemon (tests/fake_daemon.hpp: real protocol, real shared
// memory, every request answered OK) on a socket in a fresh temp dir, runs
// COMMAND with every "@SOCKET@" argument replaced by that socket's path, and
// exits with COMMAND's exit status. The C example's ctest runs through it.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fake_daemon.hpp"

int main(int argc, char** argv) {
  int first = 1;
  if (first < argc && std::strcmp(argv[first], "--") == 0) ++first;
  if (first >= argc) {
    std::fprintf(stderr, "usage: fake_fairschedd -- COMMAND [ARGS...]\n");
    return 2;
  }
  fairsched::testing::FakeDaemon daemon;
  daemon.start();
  std::vector<std::string> args(argv + first, argv + argc);
  for (std::string& a : args) {
    if (a == "@SOCKET@") a = daemon.socketPath();
  }
  std::vector<char*> cargs;  // built before fork: the child only execs
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(cargs[0], cargs.data());
    std::perror("execv");
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  daemon.stop();
  std::fprintf(stderr, "fake_fairschedd: %zu hellos, %zu submissions\n", daemon.hellos(),
               daemon.submissions());
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
